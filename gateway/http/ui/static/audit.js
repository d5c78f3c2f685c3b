"use strict";
// The audit log page. Everything from the API is inserted with textContent, never innerHTML.

const state = { cursor: null };

function query() {
  const p = new URLSearchParams({ limit: "100" });
  for (const [id, name] of [["f-since", "since"], ["f-until", "until"]]) {
    const v = $(id).value;
    if (v) p.set(name, new Date(v).toISOString());
  }
  for (const [id, name] of [["f-actor", "actor"], ["f-action", "action"]]) {
    const v = $(id).value.trim();
    if (v) p.set(name, v);
  }
  return p;
}

function row(e) {
  const tr = el("tr");
  tr.dataset.action = e.action;
  const when = el("td", "mono", new Date(e.at).toLocaleString());
  when.title = e.at;
  const object = e.object_type ? e.object_type + " " + (e.object_id || "") : "";
  const outcome = el("td");
  const cls = e.outcome === "ok" ? "sent" : "failed";
  const badge = el("span", "badge " + cls, e.outcome);
  outcome.append(badge);
  if (e.reason) outcome.append(el("div", "muted", e.reason));
  const origin = e.surface + (e.remote_addr ? " · " + e.remote_addr : "");
  const details = Object.keys(e.details || {}).length ? JSON.stringify(e.details) : "";
  tr.append(when, el("td", "mono", e.actor), el("td", "mono", e.action), el("td", "mono", object),
    outcome, el("td", "muted", origin), el("td", "mono", details));
  return tr;
}

async function load(more) {
  const p = query();
  if (more && state.cursor) p.set("cursor", state.cursor);
  const page = await api("/api/v1/audit?" + p);
  const body = $("audit-rows");
  if (!more) body.replaceChildren();
  for (const e of page.items) body.append(row(e));
  if (!body.children.length) {
    const tr = el("tr"); const td = el("td", "muted", "no events"); td.colSpan = 7; tr.append(td); body.append(tr);
  }
  state.cursor = page.next_cursor;
  $("more").hidden = !page.next_cursor;
}

$("auth").onsubmit = (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("auth").style.display = "none";
  load(false).catch(notice);
};
$("filters").onsubmit = (e) => { e.preventDefault(); load(false).catch(notice); };
$("more").onclick = () => load(true).catch(notice);
load(false).catch(notice);
