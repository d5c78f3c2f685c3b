"use strict";
// The operator pages. Everything that comes from the API (and so from chat users) is inserted
// with textContent, never innerHTML.

function cell(text, cls) { return el("td", cls, text === null || text === undefined ? "" : text); }

function badge(status, extra) {
  const b = el("span", "badge " + status + (extra ? " " + extra : ""), status);
  b.dataset.status = status;
  return b;
}

function ago(iso) {
  if (!iso) return "–";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + "s ago";
  if (s < 3600) return Math.round(s / 60) + "m ago";
  if (s < 86400) return Math.round(s / 3600) + "h ago";
  return new Date(iso).toLocaleString();
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 120) return Math.round(value) + "s";
  return Math.round(value / 60) + "m";
}

function targetText(t) {
  if (!t) return "";
  const parts = [t.platform, "chat " + t.chat_id];
  parts.push(t.thread_id ? "thread " + t.thread_id : "no thread");
  if (t.reply_to_message_id) parts.push("reply to " + t.reply_to_message_id);
  for (const [k, v] of Object.entries(t.extra || {})) parts.push(k + " " + v);
  return parts.join(" · ");
}

function sessionHref(id) { return "/ops/sessions/" + encodeURIComponent(id); }

function every(ms, fn) {
  const tick = async () => {
    try { await fn(); } catch (e) { notice(e); }
    setTimeout(tick, ms);
  };
  setTimeout(tick, ms);
}

$("auth").onsubmit = (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("auth").style.display = "none";
  start().catch(notice);
};

// --- the sessions page --------------------------------------------------------------------

const list = { cursor: null, pages: 0 };

function filters() {
  const p = new URLSearchParams({ limit: "50" });
  for (const [id, name] of [["f-platform", "platform"], ["f-chat", "chat"], ["f-status", "status"], ["f-q", "q"],
    ["f-topic", "topic"], ["f-priority", "min_priority"]]) {
    const v = $(id).value.trim();
    if (v) p.set(name, v);
  }
  // sessions carrying every tag given (comma or space separated)
  for (const tag of $("f-tags").value.split(/[\s,]+/).filter(Boolean)) p.append("tag", tag);
  return p;
}

async function loadCounts() {
  const c = await api("/api/v1/stats");
  // a count past the store's exact limit is the planner's estimate: shown as "~n"
  const about = (name, n) => ((c.approximate || []).includes(name) ? "~" : "") + n;
  $("count-active").textContent = about("sessions.active", c.sessions.active);
  $("count-closed").textContent = about("sessions.closed", c.sessions.closed);
  $("count-pending").textContent = c.deliveries.pending + c.deliveries.sending;
  $("count-oldest").textContent = seconds(c.oldest_pending_delivery_seconds);
  $("count-failed").textContent = c.deliveries.failed;
  $("count-rejected").textContent = c.inbound.rejected;
  $("count-failed-box").classList.toggle("alert", c.deliveries.failed > 0);
  $("count-rejected-box").classList.toggle("alert", c.inbound.rejected > 0);
}

// a session key as the gateway writes it (SessionKey.__str__): "%" and ":" in the platform,
// chat and thread escaped ("%25", "%3A"; the scope keeps its ":"), "-" for no thread
function keyPart(text, colon = true) {
  const escaped = String(text).replace(/%/g, "%25");
  return colon ? escaped.replace(/:/g, "%3A") : escaped;
}
function sessionKeyText(k) {
  const thread = !k.thread_id ? "-" : k.thread_id === "-" ? "%2D" : keyPart(k.thread_id);
  return [keyPart(k.platform), keyPart(k.scope, false), keyPart(k.chat_id), thread].join(":");
}

// the profile in force in each listed session's place (resolved from the gateway's memory)
async function fillProfiles(body) {
  const rows = Array.from(body.querySelectorAll("tr[data-key]")).filter((tr) => !tr.dataset.profile);
  if (!rows.length) return;
  const p = new URLSearchParams();
  for (const tr of rows) p.append("key", tr.dataset.key);
  let found = {};
  try { found = (await api("/api/v1/profiles/sessions?" + p.toString())).profiles; } catch (e) { return; }
  for (const tr of rows) {
    tr.dataset.profile = found[tr.dataset.key] || "";
    tr.querySelector("td.profile").textContent = tr.dataset.profile;
  }
}

async function loadSessions(more) {
  const p = filters();
  if (more && list.cursor) p.set("cursor", list.cursor);
  const page = await api("/api/v1/sessions?" + p.toString());
  const body = $("session-rows");
  if (!more) { body.replaceChildren(); list.pages = 0; }
  for (const s of page.items) {
    const tr = el("tr", "row");
    tr.dataset.sessionId = s.id;
    const link = el("a", "", s.id);
    link.href = sessionHref(s.id);
    const id = el("td", "mono"); id.append(link);
    const status = el("td"); status.append(badge(s.status));
    tr.append(id, cell(s.key.platform), cell(s.key.chat_id, "mono"), cell(s.key.thread_id || "–", "mono"),
      cell(s.title || "(untitled)"), cell(s.topic || "–", "topic"), cell(s.priority, "priority"),
      cell((s.tags || []).join(", "), "tags"), cell("", "profile"), status, cell(s.message_count), cell(ago(s.last_message_at)));
    tr.dataset.key = sessionKeyText(s.key);
    tr.onclick = (e) => { if (e.target.tagName !== "A") location.href = sessionHref(s.id); };
    body.append(tr);
  }
  if (!page.items.length && !more) {
    const tr = el("tr"); const td = el("td", "muted", "no sessions match"); td.colSpan = 12; tr.append(td); body.append(tr);
  }
  await fillProfiles(body);
  list.cursor = page.next_cursor;
  list.pages += 1;
  $("more").hidden = !page.next_cursor;
}

async function searchMessages() {
  const q = $("f-search").value.trim();
  const box = $("search-results");
  if (!q) { box.hidden = true; return; }
  const p = new URLSearchParams({ q, limit: "50" });
  const platform = $("f-platform").value.trim();
  if (platform) p.set("platform", platform);
  const page = await api("/api/v1/search?" + p.toString());
  $("search-echo").textContent = q;
  const body = $("search-rows"); body.replaceChildren();
  for (const h of page.items) {
    const tr = el("tr", "row");
    const a = el("a", "", "#" + h.session_id + " " + (h.session_title || h.session_key.chat_id));
    a.href = sessionHref(h.session_id);
    const td = el("td"); td.append(a);
    tr.append(td, cell(h.seq_no), cell(h.role), cell(h.snippet));
    tr.onclick = (e) => { if (e.target.tagName !== "A") location.href = sessionHref(h.session_id); };
    body.append(tr);
  }
  if (!page.items.length) {
    const tr = el("tr"); const td2 = el("td", "muted", "no messages match"); td2.colSpan = 4; tr.append(td2); body.append(tr);
  }
  box.hidden = false;
}

// an ambiguous send may already be on the platform; retrying may post it twice
function ambiguousOk(d) {
  return !d.ambiguous || window.confirm("This reply may already be posted (the send was cut off). " +
    "Check the thread first. Send it again anyway?");
}

async function retry(id) {
  await api("/api/v1/deliveries/" + encodeURIComponent(id) + "/retry", { method: "POST" });
}

async function loadFailed() {
  const page = await api("/api/v1/deliveries?status=failed&limit=50");
  const body = $("failed-rows"); body.replaceChildren();
  for (const d of page.items) {
    const tr = el("tr");
    tr.dataset.deliveryId = d.id;
    const link = el("a", "", "#" + d.session_id); link.href = sessionHref(d.session_id);
    const s = el("td"); s.append(link);
    const button = el("button", "secondary", "Retry");
    button.type = "button";
    button.onclick = () => ambiguousOk(d) && retry(d.id).then(() => Promise.all([loadFailed(), loadCounts()])).catch(notice);
    const action = el("td"); action.append(button);
    const error = cell(d.last_error || "", "error");
    if (d.ambiguous) error.prepend(badge("ambiguous"), " ");
    tr.append(cell(d.id, "mono"), s, cell(d.seq_no + "/" + d.part_no), cell(targetText(d.target), "mono"),
      cell(d.attempts), error, action);
    body.append(tr);
  }
  if (!page.items.length) {
    const tr = el("tr"); const td = el("td", "muted", "no failed deliveries"); td.colSpan = 7; tr.append(td); body.append(tr);
  }
}

async function loadModels() {
  // open circuit breakers and models that failed in the last hour (every replica's)
  const items = await api("/api/v1/models/health");
  const body = $("model-rows"); body.replaceChildren();
  for (const m of items) {
    const tr = el("tr");
    tr.append(cell(m.model, "mono"), cell(m.open ? "open until " + m.open_until : "closed", m.open ? "error" : ""),
      cell(m.failures), cell(m.last_cause || ""), cell(m.last_error || "", "error"), cell(m.last_error_at || ""));
    body.append(tr);
  }
  if (!items.length) {
    const tr = el("tr"); const td = el("td", "muted", "no provider errors in the last hour"); td.colSpan = 6; tr.append(td); body.append(tr);
  }
}

async function loadRejected() {
  const page = await api("/api/v1/inbound-events?status=rejected&limit=50");
  const body = $("rejected-rows"); body.replaceChildren();
  for (const ev of page.items) {
    const tr = el("tr");
    // the list leaves raw payloads out: one click loads this event's
    const payload = el("td"); const show = el("button", "show-payload", "show");
    show.type = "button";
    show.onclick = async () => {
      const one = await api("/api/v1/inbound-events/" + encodeURIComponent(ev.id));
      payload.replaceChildren(el("pre", "payload mono", JSON.stringify(one.payload, null, 2)));
    };
    payload.append(show);
    tr.append(cell(ev.id, "mono"), cell(ev.platform), cell(ago(ev.received_at)), cell(ev.reason), payload);
    body.append(tr);
  }
  if (!page.items.length) {
    const tr = el("tr"); const td = el("td", "muted", "no rejected events"); td.colSpan = 5; tr.append(td); body.append(tr);
  }
}

function initSessions() {
  $("filters").onsubmit = (e) => { e.preventDefault(); list.cursor = null; loadSessions(false).catch(notice); searchMessages().catch(notice); };
  $("search-button").onclick = () => searchMessages().catch(notice);
  $("more").onclick = () => loadSessions(true).catch(notice);
  every(3000, async () => {
    await loadCounts();
    if (list.pages <= 1) await loadSessions(false);  // keep a scrolled-in list still
  });
  every(10000, () => Promise.all([loadFailed(), loadRejected(), loadModels()]));
}

async function startSessions() {
  await Promise.all([loadCounts(), loadSessions(false), loadFailed(), loadRejected(), loadModels()]);
}

// --- the session page ---------------------------------------------------------------------

const view = { ref: null, id: null, messages: new Map(), firstSeq: null, lastSeq: 0 };

function li(text, cls) { return el("li", cls, text); }

function fillList(id, items, render, empty) {
  const ul = $(id); ul.replaceChildren();
  for (const item of items) ul.append(render(item));
  if (!items.length) ul.append(li(empty, "muted"));
}

async function loadDetail() {
  const d = await api("/api/v1/sessions/" + encodeURIComponent(view.ref));
  const s = d.session;
  view.id = s.id;
  view.lastSeq = s.last_seq_no;
  document.title = "Session " + s.id + " · chat gateway";
  $("session-title").replaceChildren(el("span", "", "Session " + s.id + " "), badge(s.status));
  $("session-key").textContent = sessionKeyText(s.key);
  const counts = Object.entries(d.deliveries).map(([k, v]) => v + " " + k).join(", ") || "none";
  $("session-facts").textContent = (s.title ? "“" + s.title + "” · " : "") + s.message_count + " messages · last activity " +
    ago(s.last_message_at) + " · created " + new Date(s.created_at).toLocaleString() +
    (s.selected_model ? " · model " + s.selected_model : "") + " · deliveries: " + counts;
  // the lifecycle: status (in the title), topic, priority, tags
  $("session-lifecycle").replaceChildren(
    el("span", "topic", "topic " + (s.topic || "–")), el("span", "priority", "priority " + s.priority),
    el("span", "tags", "tags " + ((s.tags || []).join(", ") || "–")));
  fillList("participants", d.participants, (p) => li(p.participant + " (" + p.role + ") · read up to #" + p.last_read_seq), "none");
  fillList("checkpoints", d.checkpoints, (c) => li(c.name + ": " + c.status + (c.detail ? " — " + c.detail : "")), "none");
  fillList("summaries", d.summaries, (m) => li("#" + m.from_seq + "–#" + m.to_seq + (m.model ? " (" + m.model + ")" : "") + ": " + m.content), "none");
  const links = d.links.map((l) => ({ link: true, session: l.linked_session_id, text: l.relation + ": " +
      (l.link_type ? l.link_type + " " + l.target_ref : l.url || "session " + l.linked_session_id) }))
    .concat(d.artifacts.map((a) => ({ text: a.kind + " " + a.name + (a.uri ? " — " + a.uri : "") })));
  fillList("artifacts", links, (x) => {
    const item = li(x.text, x.link ? "link" : "artifact");
    if (x.session) { item.textContent = ""; const a = el("a", "", x.text); a.href = sessionHref(x.session); item.append(a); }
    return item;
  }, "none");
}

function renderDelivery(d) {
  const row = el("div", "delivery");
  row.dataset.deliveryId = d.id;
  row.append(badge(d.status, "delivery-status"), el("span", "", "part " + d.part_no),
    ...(d.ambiguous ? [badge("ambiguous")] : []),
    // claimed but still waiting for the chat's pacer, nothing sent yet
    ...(d.status === "sending" && d.pacing_until ? [el("span", "badge pending", "waiting for pacing")] : []),
    el("span", "", "attempts " + d.attempts), el("span", "mono target", "→ " + targetText(d.target)));
  if (d.platform_message_id) row.append(el("span", "mono", "platform id " + d.platform_message_id));
  if (d.last_error) row.append(el("span", "error", d.last_error));
  if (d.status === "failed") {
    const b = el("button", "secondary", "Retry");
    b.type = "button";
    b.onclick = () => ambiguousOk(d) && retry(d.id).then(refreshTranscript).catch(notice);
    row.append(b);
  }
  return row;
}

// tool calls, results, routing and approvals, from the message's metadata
function toolLines(m) {
  const md = m.metadata || {};
  const out = [];
  if (m.role === "assistant" && Array.isArray(md.tool_calls)) {
    for (const c of md.tool_calls) {
      const fn = c.function || {};
      out.push("→ call " + c.id + ": " + fn.name + "(" + String(fn.arguments || "").slice(0, 200) + ")");
    }
  }
  if (m.role === "tool" && md.tool_call_id) {
    out.push("← result of " + md.tool_call_id + " (" + md.tool_name + "): " + md.outcome + ", " + md.duration_ms + " ms");
  }
  if (md.routing) {
    out.push("routing: " + md.routing.phase + " · domains " + ((md.routing.domains || []).join(", ") || "–") + " · confidence " + md.routing.confidence);
    if (Array.isArray(md.offered_tools)) out.push("offered tools: " + (md.offered_tools.join(", ") || "(none)"));
  }
  if (md.approval) out.push("approval card " + md.approval.id + " for " + md.approval.tool);
  return out;
}

// clickable citations: [n] in an answer shows the passage frozen with it
// (/api/v1/kb/citations/{message id}: document, page or section, passage text)
function citedNumbers(m) {
  const cited = (m.metadata || {}).citations;
  return m.role === "assistant" && Array.isArray(cited) ? cited.map((c) => c.ordinal).filter(Number.isInteger) : [];
}
function linkCitations(body, cited, open) {
  const nums = new Set(cited);
  const node = body.firstChild;
  if (!node || node.nodeType !== Node.TEXT_NODE) return;
  const parts = node.textContent.split(/(\[\d{1,3}\])/);
  if (parts.length < 2) return;
  const frag = document.createDocumentFragment();
  for (const part of parts) {
    const hit = /^\[(\d{1,3})\]$/.exec(part);
    if (hit && nums.has(Number(hit[1]))) {
      const a = el("a", "cite", part);
      a.href = "#"; a.title = "show the cited passage";
      a.onclick = (e) => { e.preventDefault(); open(Number(hit[1])); };
      frag.append(a);
    } else if (part) frag.append(document.createTextNode(part));
  }
  node.replaceWith(frag);
}
const citationCache = new Map();  // message id -> its frozen citations
const openCitations = new Map();  // message id -> the [n] shown (kept across refreshes)
async function showCitation(messageId, n, box) {
  try {
    if (!citationCache.has(messageId)) citationCache.set(messageId, await api("/api/v1/kb/citations/" + encodeURIComponent(messageId)));
  } catch (err) { notice(err); return; }
  if (openCitations.get(messageId) === n) openCitations.delete(messageId); else openCitations.set(messageId, n);
  citationPanel(messageId, box);
}
function citationPanel(messageId, box) {
  const shown = box.querySelector(".citation");
  if (shown) shown.remove();
  const n = openCitations.get(messageId);
  if (n === undefined || !citationCache.has(messageId)) return;
  const c = citationCache.get(messageId).find((x) => x.ordinal === n);
  const panel = el("div", "citation");
  if (!c) { panel.append(el("div", "muted", "[" + n + "] not found")); box.append(panel); return; }
  const where = [c.document_name, c.page !== null && c.page !== undefined ? "p. " + c.page : null].filter(Boolean).join(", ") + (c.section ? " — " + c.section : "");
  panel.append(el("div", "src", "[" + n + "] " + where + " · document " + c.document_id + " · passage " + c.chunk_id + " · score " + Number(c.score).toFixed(4)), el("blockquote", "", c.passage));
  if (c.minutes_of) {  // the minutes of a session: the citation opens it
    const open = el("a", "minutes-session", "open session " + c.minutes_of);
    open.href = sessionHref(c.minutes_of);
    panel.append(open);
  }
  box.append(panel);
}

function renderMessage(m) {
  const box = el("div", "msg " + m.role);
  box.dataset.seq = m.seq_no;
  const meta = el("div", "meta");
  meta.append(el("span", "mono", "#" + m.seq_no), el("strong", "", m.role === "user" ? (m.sender_name || m.sender_id || "user") : m.role));
  if (m.role !== "user" && m.sender_name) meta.append(el("span", "", "as " + m.sender_name));
  meta.append(el("span", "", new Date(m.created_at).toLocaleString()));
  if (m.model) meta.append(el("span", "model", "model " + m.model));
  if ((m.metadata || {}).profile) meta.append(el("span", "profile", "profile " + m.metadata.profile));
  if (m.tokens_used !== null && m.tokens_used !== undefined) meta.append(el("span", "tokens", m.tokens_used + " tokens"));
  if (m.feedback !== null && m.feedback !== undefined) {
    meta.append(el("span", "feedback", "feedback " + (m.feedback > 0 ? "👍" : m.feedback < 0 ? "👎" : String(m.feedback))));
  }
  if (m.command) meta.append(el("span", "", "/" + m.command));
  if (m.edited_at) meta.append(el("span", "", "edited"));
  if (m.role === "user" && m.reply_target) meta.append(el("span", "mono target", "replies go to " + targetText(m.reply_target)));
  const body = el("div", "body", m.content);
  const cited = citedNumbers(m);
  if (cited.length) linkCitations(body, cited, (n) => showCitation(m.id, n, box));
  box.append(meta, body);
  for (const line of toolLines(m)) box.append(el("div", "meta tool", line));
  for (const d of m.deliveries || []) box.append(renderDelivery(d));
  if (m.role === "assistant" && !(m.deliveries || []).length && !(m.metadata || {}).tool_calls) box.append(el("div", "delivery muted", "not delivered (stored only)"));
  if (cited.length) citationPanel(m.id, box);
  return box;
}

function renderTranscript() {
  const box = $("transcript");
  const seqs = Array.from(view.messages.keys()).sort((a, b) => a - b);
  box.replaceChildren(...seqs.map((s) => renderMessage(view.messages.get(s))));
  if (!seqs.length) box.append(el("p", "muted", "no messages yet"));
  $("earlier").hidden = !(view.firstSeq && view.firstSeq > 1);
}

function merge(page) {
  for (const m of page.items) view.messages.set(m.seq_no, m);
  if (page.items.length) {
    const first = page.items[0].seq_no;
    view.firstSeq = view.firstSeq === null ? first : Math.min(view.firstSeq, first);
  }
}

let refreshes = 0;
async function refreshTranscript() {
  const base = "/api/v1/sessions/" + encodeURIComponent(view.ref) + "/messages?";
  const mine = ++refreshes;
  let page;
  if (view.firstSeq === null) {
    page = await api(base + new URLSearchParams({ before_seq: String(view.lastSeq + 1), limit: "200" }));
  } else {
    // new messages, and the delivery status of the recent ones
    const from = Math.max(view.firstSeq - 1, view.lastSeq - 100);
    page = await api(base + new URLSearchParams({ after_seq: String(Math.max(from, 0)), limit: "500" }));
  }
  if (mine !== refreshes) return;  // a newer refresh is on its way: never show older statuses
  merge(page);
  renderTranscript();
}

async function loadEarlier() {
  const base = "/api/v1/sessions/" + encodeURIComponent(view.ref) + "/messages?";
  merge(await api(base + new URLSearchParams({ before_seq: String(view.firstSeq), limit: "200" })));
  renderTranscript();
}

async function searchSession() {
  const q = $("search-q").value.trim();
  const ul = $("search-hits"); ul.replaceChildren();
  if (!q) return;
  const page = await api("/api/v1/sessions/" + encodeURIComponent(view.ref) + "/search?" + new URLSearchParams({ q, limit: "50" }));
  for (const h of page.items) ul.append(li("#" + h.seq_no + " " + h.role + ": " + h.snippet));
  if (!page.items.length) ul.append(li("no messages match", "muted"));
}

function initSession() {
  view.ref = decodeURIComponent(location.pathname.slice("/ops/sessions/".length));
  $("earlier").onclick = () => loadEarlier().catch(notice);
  $("search-form").onsubmit = (e) => { e.preventDefault(); searchSession().catch(notice); };
  every(2000, async () => { if (!view.missing) { await loadDetail(); await refreshTranscript(); } });
}

async function startSession() {
  try {
    await loadDetail();
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return showMissingSession();
    throw e;
  }
  await refreshTranscript();
}

// a session that does not exist (a stale link, a typo): say so once, stop polling
function showMissingSession() {
  view.missing = true;
  document.title = "No such session · chat gateway";
  $("notice").textContent = "";
  $("session-title").textContent = "No such session";
  $("session-key").textContent = view.ref;
  const back = el("a", "", "Back to the sessions");
  back.href = "/ops";
  $("session-facts").replaceChildren(el("span", "", "There is no session " + view.ref + ". "), back);
  for (const hide of document.querySelectorAll(".grid, #search-form, #search-hits, h2, #earlier, #transcript")) hide.style.display = "none";
}

// --- start --------------------------------------------------------------------------------

const page = document.body.dataset.page;
function start() { return page === "session" ? startSession() : startSessions(); }
if (page === "session") initSession(); else initSessions();
start().catch(notice);
