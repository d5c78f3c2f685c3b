"use strict";
// The schedules' operator page: each schedule with its next and last firing and that
// firing's outcome; run one now or remove it. API content is only inserted with textContent.

function when(v) { return v ? new Date(v).toLocaleString() : "–"; }

function button(label, onClick) {
  const b = el("button", "secondary", label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

async function load() {
  const rows = $("schedule-rows");
  const found = await api("/api/v1/schedules");
  rows.replaceChildren();
  for (const s of found) {
    const tr = el("tr");
    const kind = s.cron ? "cron " + s.cron + " (" + s.time_zone + ")" : "at " + when(s.at);
    const status = s.status === "paused" ? "paused: " + s.paused_reason : s.status;
    const actions = el("td");
    actions.append(
      button("Run now", () => api("/api/v1/schedules/" + s.id + "/run", { method: "POST" }).then(load).catch(notice)),
      button("Remove", () => {
        if (!confirm("Remove schedule " + s.id + "?")) return;
        api("/api/v1/schedules/" + s.id, { method: "DELETE" }).then(load).catch(notice);
      }));
    for (const v of [s.id, s.place, kind, s.owner, status, when(s.next_fire_at), when(s.last_fire_at),
      s.last_outcome || "–", s.prompt]) tr.append(el("td", null, v));
    tr.append(actions);
    rows.append(tr);
  }
  if (!found.length) {
    const tr = el("tr");
    const td = el("td", null, "No schedules.");
    td.colSpan = 10;
    tr.append(td);
    rows.append(tr);
  }
}

$("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("auth").style.display = "none";
  load().catch(notice);
});
load().catch(notice);
setInterval(() => load().catch(notice), 5000);
