"use strict";
// Everything user-supplied is inserted with textContent, never innerHTML. The one exception
// is an assistant reply's Markdown, rendered by the vendored markdown-it with raw HTML off
// (html: false escapes any tag in the text; its link validator refuses javascript: URLs).
const md = window.markdownit({ html: false, linkify: false, breaks: true });
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx].attrSet("target", "_blank");
  tokens[idx].attrSet("rel", "noopener noreferrer nofollow");
  return self.renderToken(tokens, idx, options);
};
function markdownBody(text) {
  const body = el("div", "body md");
  body.innerHTML = md.render(text);
  return body;
}
const state = { channel: "general", thread: null, source: null, poll: null, me: null, editing: false };
// deep links: #channel/thread
(function fromHash() {
  const [c, t] = decodeURIComponent(location.hash.slice(1)).split("/");
  if (c && /^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}|~[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63})$/.test(c)) state.channel = c;
  if (t && /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(t)) state.thread = t;
})();
const $ = (id) => document.getElementById(id);
// signed out (or the sign-in expired): back to the sign-in page
const api = (path, opts) => fetch(path, opts).then((r) => { if (r.status === 401) { location.href = "/login"; throw new Error("signed out"); } return r.json(); });
const newId = () => (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2)).replace(/[^A-Za-z0-9_-]/g, "").slice(0, 32);

function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }

async function loadChannels() {
  const data = await api("/web/api/channels");
  const box = $("channels"); box.replaceChildren();
  // the signed-in person's private channel (~name) comes first: only they see it
  const channels = [data.private, ...data.channels.filter((c) => c !== data.private)];
  if (!channels.includes(state.channel)) channels.push(state.channel);
  for (const c of channels) {
    const label = c === data.private ? "# " + c + " (private)" : "# " + c;
    const b = el("button", "item" + (c === state.channel ? " active" : ""), label);
    b.onclick = () => { state.channel = c; state.thread = null; render(); };  // stays on the list
    box.append(b);
  }
}

async function loadThreads() {
  const data = await api(`/web/api/channels/${encodeURIComponent(state.channel)}/threads`);
  const box = $("thread-list"); box.replaceChildren();
  for (const t of data.threads) {
    const b = el("button", "thread" + (t.thread_id === state.thread ? " active" : ""));
    b.dataset.thread = t.thread_id;
    b.append(el("div", "", t.title || "(untitled)"), el("div", "meta", `${t.message_count} messages · ${t.status}`));
    b.onclick = () => { state.thread = t.thread_id; showConversation(); render(); };
    box.append(b);
  }
}

let historyRequests = 0;
async function loadHistory() {
  const log = $("log");
  if (!state.thread) { log.replaceChildren(el("p", "meta", "Start a new thread by sending a message.")); return; }
  if (state.editing) return;  // the person is editing a message: the view stays until saved
  const mine = ++historyRequests;
  const data = await api(`/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/messages`);
  // responses can arrive out of order: an older one must not replace a newer view
  if (mine !== historyRequests) return;
  log.replaceChildren();
  // the thread's earlier sessions (before a /new), read-only, each closed by a divider
  for (const e of data.earlier || []) {
    for (const m of e.messages) {
      const d = el("div", "msg earlier " + m.role);
      const who = m.role === "assistant" ? "assistant" : (m.sender || "user");
      d.append(el("div", "who", who), m.role === "assistant" ? markdownBody(m.content) : el("div", "body", m.content));
      log.append(d);
    }
    log.append(sessionDivider());
  }
  const shown = new Set();
  for (const m of data.messages) {
    const d = el("div", "msg " + m.role);
    d.dataset.seq = m.seq_no;
    const who = m.role === "assistant" ? "assistant" + (m.delivery ? ` · ${m.delivery}` : "") : (m.sender || "user");
    const body = m.role === "assistant" ? markdownBody(m.content) : el("div", "body", m.content);
    if (m.role === "assistant" && (m.citations || []).length) linkCitations(body, m.citations, (n, box) => showCitation(m.seq_no, n, box));
    d.append(el("div", "who", who), body);
    if (m.role === "assistant" && m.model !== "command") d.append(feedbackBar(m));
    if (m.role === "user" && m.edited) d.querySelector(".who").append(" · edited");
    if (m.role === "user" && state.me && m.sender === state.me) d.append(ownBar(m, body));
    if (m.approval) d.append(approvalBar(m.approval));
    if ((m.citations || []).length) citationPanel(m.seq_no, d);
    log.append(d);
    // the answer's files, stored with it (a reload shows them too)
    for (const f of m.files || []) { shown.add(f.id); log.append(fileCard(f)); }
  }
  for (const f of liveFiles.get(state.thread) || []) if (!shown.has(f.id)) log.append(fileCard(f));
  for (const [id, text] of previews) log.append(previewCard(id, text));
  // closed (by /new or for being idle): the next message starts a new session
  if (data.status === "closed") log.append(sessionDivider());
  log.scrollTop = log.scrollHeight;
}
function sessionDivider() {
  return el("div", "divider", "new session · the messages above are not part of its context");
}

// clickable citations: each [n] an answer cites becomes a button that shows the
// passage frozen with the answer (document, page or section, the passage text), read from
// this thread's own endpoint; text only (textContent), never HTML
function linkCitations(body, cited, open) {
  const nums = new Set(cited);
  const walker = document.createTreeWalker(body, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  for (const node of nodes) {
    if (node.parentElement && node.parentElement.closest("code, pre, a")) continue;
    const parts = node.textContent.split(/(\[\d{1,3}\])/);
    if (parts.length < 2) continue;
    const frag = document.createDocumentFragment();
    for (const part of parts) {
      const hit = /^\[(\d{1,3})\]$/.exec(part);
      if (hit && nums.has(Number(hit[1]))) {
        const b = el("button", "cite", part);
        b.type = "button"; b.title = "show the cited passage";
        b.onclick = () => open(Number(hit[1]), body.parentElement);
        frag.append(b);
      } else if (part) frag.append(document.createTextNode(part));
    }
    node.replaceWith(frag);
  }
}
const citationCache = new Map();  // "thread/seq" -> the answer's frozen citations
const openCitations = new Map();  // "thread/seq" -> the [n] shown (kept across reloads)
async function showCitation(seq, n, box) {
  const key = state.thread + "/" + seq;
  const opening = openCitations.get(key) !== n;
  // ?n= counts the opened passage as read (the knowledge base's access counter)
  const url = `/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/messages/${seq}/citations` + (opening ? `?n=${n}` : "");
  if (!citationCache.has(key)) citationCache.set(key, (await api(url)).citations || []);
  else if (opening) api(url).catch(() => {});
  if (opening) openCitations.set(key, n); else openCitations.delete(key);
  citationPanel(seq, box);
}
function citationPanel(seq, box) {
  const key = state.thread + "/" + seq;
  const shown = box.querySelector(".citation");
  if (shown) shown.remove();
  const n = openCitations.get(key);
  if (n === undefined || !citationCache.has(key)) return;
  const c = citationCache.get(key).find((x) => x.n === n);
  const panel = el("div", "citation");
  if (!c) { panel.append(el("div", "meta", `[${n}] not found`)); box.append(panel); return; }
  const where = [c.document, c.page !== null && c.page !== undefined ? "p. " + c.page : null].filter(Boolean).join(", ") + (c.section ? " — " + c.section : "");
  panel.append(el("div", "src", `[${n}] ${where}`), el("blockquote", "", c.passage));
  box.append(panel);
}
// streaming: the answer so far, as Markdown, until the stored reply replaces it
const previews = new Map();
function previewCard(id, text) {
  const d = el("div", "msg assistant preview");
  d.dataset.preview = id;
  d.append(el("div", "who", "assistant · writing…"), markdownBody(text));
  return d;
}
function showPreview(e) {
  if (typeof e.text !== "string") return;  // too long for a notification: keep the last
  previews.set(e.id, e.text);
  const log = $("log");
  const old = log.querySelector(`[data-preview="${CSS.escape(e.id)}"]`);
  const card = previewCard(e.id, e.text);
  const atEnd = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  if (old) old.replaceWith(card); else log.append(card);
  if (atEnd || !old) log.scrollTop = log.scrollHeight;
}
function dropPreview(id) {
  previews.delete(id);
  const old = $("log").querySelector(`[data-preview="${CSS.escape(id)}"]`);
  if (old) old.remove();
}

// an approval card: buttons while pending, the decision once made; the person
// deciding is the signed-in one (the server never takes a name from the page)
function approvalBar(a) {
  const bar = el("div", "fb approval");
  if (a.status !== "pending") {
    bar.append(el("span", "meta", a.status + (a.decided_by ? " by " + a.decided_by : "")));
    return bar;
  }
  for (const [decision, label] of [["approve", "\u2705 Approve"], ["deny", "\u274C Deny"]]) {
    const b = el("button", "", label);
    b.type = "button";
    b.onclick = () => sendApproval(a.id, decision);
    bar.append(b);
  }
  return bar;
}

async function sendApproval(id, decision) {
  const url = `/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/approvals/${encodeURIComponent(id)}`;
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ decision }) });
  const data = await res.json();
  if (data.message) $("typing").textContent = data.message;
  await loadHistory();
}

// thumbs up/down on an answer: stored as its feedback; clicking the lit one takes it back.
// Drawn as inline SVG: no emoji font may be installed.
const THUMB_UP = "M14 9V5a3 3 0 0 0-3-3l-4 9v11h11.28a2 2 0 0 0 2-1.7l1.38-9a2 2 0 0 0-2-2.3zM7 22H4a2 2 0 0 1-2-2v-7a2 2 0 0 1 2-2h3";
const THUMB_DOWN = "M10 15v4a3 3 0 0 0 3 3l4-9V2H5.72a2 2 0 0 0-2 1.7l-1.38 9a2 2 0 0 0 2 2.3zm7-13h2.67A2.31 2.31 0 0 1 22 4v7a2.31 2.31 0 0 1-2.33 2H17";
function icon(path) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24"); svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("fill", "none"); svg.setAttribute("stroke", "currentColor");
  svg.setAttribute("stroke-width", "2"); svg.setAttribute("stroke-linecap", "round"); svg.setAttribute("stroke-linejoin", "round");
  const p = document.createElementNS(ns, "path"); p.setAttribute("d", path); svg.append(p);
  return svg;
}
function feedbackBar(m) {
  const bar = el("div", "fb");
  for (const [value, path, title] of [[1, THUMB_UP, "Good answer"], [-1, THUMB_DOWN, "Bad answer"]]) {
    const b = el("button", m.feedback === value ? "on" : "");
    b.append(icon(path));
    b.title = title; b.type = "button"; b.setAttribute("aria-label", title);
    b.setAttribute("aria-pressed", String(m.feedback === value));
    b.onclick = () => sendFeedback(m.seq_no, m.feedback === value ? 0 : value);
    bar.append(b);
  }
  return bar;
}

// the person's own messages: edit (the answer follows the new text) or delete
function ownBar(m, body) {
  const bar = el("div", "own");
  const edit = el("button", "", "edit"); edit.type = "button"; edit.title = "Edit this message";
  edit.onclick = () => {
    state.editing = true;  // a reload of the thread would take the box away meanwhile
    const box = el("textarea"); box.value = m.content; box.rows = 2;
    const save = el("button", "", "save"); save.type = "button";
    const cancel = el("button", "", "cancel"); cancel.type = "button";
    save.onclick = () => {
      state.editing = false;
      const text = box.value.trim();
      if (text && text !== m.content) changeMessage(m.seq_no, "PATCH", { text }); else loadHistory();
    };
    cancel.onclick = () => { state.editing = false; loadHistory(); };
    body.replaceChildren(box); bar.replaceChildren(save, cancel); box.focus();
  };
  const del = el("button", "", "delete"); del.type = "button"; del.title = "Delete this message";
  del.onclick = () => { if (confirm("Delete this message?")) changeMessage(m.seq_no, "DELETE"); };
  bar.append(edit, del);
  return bar;
}
async function changeMessage(seq, method, body) {
  const url = `/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/messages/${seq}`;
  const init = { method };
  if (body) { init.headers = { "Content-Type": "application/json" }; init.body = JSON.stringify(body); }
  await fetch(url, init);
  await loadHistory();
}

async function sendFeedback(seq, value) {
  const url = `/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/messages/${seq}/feedback`;
  await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ value }) });
  await loadHistory();
}

// files an answer carries arrive on the live stream (not in the stored history): shown
// inline below the conversation for as long as the page is open
const liveFiles = new Map();
function addFile(e) {
  if (!e.data) return;  // relayed from another replica without its bytes (too big to relay)
  const list = liveFiles.get(state.thread) || [];
  if (list.some((f) => f.id === e.id)) return;  // a resent part: the same file
  list.push(e); liveFiles.set(state.thread, list);
  const log = $("log"); log.append(fileCard(e)); log.scrollTop = log.scrollHeight;
}
function fileCard(e) {
  const d = el("div", "msg assistant file");
  d.append(el("div", "who", "assistant · file"));
  const bytes = Uint8Array.from(atob(e.data), (c) => c.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([bytes], { type: e.mime_type }));
  if (/^image\/(png|jpeg|webp|gif)$/.test(e.mime_type)) {
    const img = el("img"); img.src = url; img.alt = e.name; d.append(img);
  }
  const link = el("a", "download", e.name); link.href = url; link.download = e.name;
  d.append(link);
  if (e.caption) d.append(el("div", "body", e.caption));
  return d;
}

// the indicator is a lease: each heartbeat extends it 5 s, typing_done or a reply ends it
let typingTimer = null;
function showTyping() {
  $("typing").textContent = "assistant is typing…";
  clearTimeout(typingTimer); typingTimer = setTimeout(hideTyping, 5000);
}
function hideTyping() { clearTimeout(typingTimer); $("typing").textContent = ""; }

function subscribe() {
  previews.clear();
  if (state.source) { state.source.close(); state.source = null; }
  if (state.poll) { clearInterval(state.poll); state.poll = null; }
  if (!state.thread) return;
  const url = `/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/stream`;
  const src = new EventSource(url);
  src.onmessage = (ev) => {
    const e = JSON.parse(ev.data);
    if (e.type === "typing") { showTyping(); return; }
    // a preview grows while the agent still works: the indicator stays
    if (e.type === "preview") { showPreview(e); return; }
    hideTyping();
    if (e.type === "typing_done") return;
    if (e.type === "file") { addFile(e); return; }
    if (e.type === "preview_gone") { dropPreview(e.id); return; }
    if (e.type === "reply" && e.id) previews.delete(e.id);  // the stored reply takes its place
    loadHistory(); loadThreads();
  };
  src.onopen = () => loadHistory();  // reload on (re)connect: nothing missed while away
  state.source = src;
  state.poll = setInterval(loadHistory, 10000);  // fallback if a proxy buffers the stream
}

async function render() {
  state.editing = false;
  history.replaceState(null, "", "#" + encodeURIComponent(state.channel) + (state.thread ? "/" + encodeURIComponent(state.thread) : ""));
  $("title").textContent = "#" + state.channel;
  $("subtitle").textContent = state.thread ? "thread " + state.thread.slice(0, 8) : "new thread";
  await Promise.all([loadChannels(), loadThreads(), loadHistory()]);
  subscribe();
}

async function send(text) {
  const body = { text, client_msg_id: newId() };
  if (state.thread) body.thread_id = state.thread;
  const res = await fetch(`/web/api/channels/${encodeURIComponent(state.channel)}/messages`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const data = await res.json();
  if (!res.ok) { alert(data.error || "could not send"); return; }
  if (state.thread !== data.thread_id) { state.thread = data.thread_id; await render(); } else { await loadHistory(); }
}

async function upload(file) {
  // a file joins the thread's documents; a new thread starts with a message naming it. The
  // body is the file itself, sent as application/octet-stream (a type no other site's page
  // can send here without the browser asking first); its real type travels as ?type=
  if (!state.thread) await send("Shared a file: " + file.name);
  const url = `/web/api/channels/${encodeURIComponent(state.channel)}/threads/${encodeURIComponent(state.thread)}/files?name=${encodeURIComponent(file.name)}&type=${encodeURIComponent(file.type || "")}`;
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/octet-stream" }, body: file });
  let data = {};
  try { data = await res.json(); } catch (e) { data = { error: "HTTP " + res.status }; }
  $("upload-note").textContent = data.note || data.error || data.detail || (res.status === 413 ? "the file is too big" : "could not upload");
}
$("file").onchange = () => { const f = $("file").files[0]; $("file").value = ""; if (f) upload(f); };
$("composer").onsubmit = (e) => { e.preventDefault(); const t = $("text").value.trim(); if (t) { $("text").value = ""; send(t); } };
$("text").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); } };
$("new-thread").onclick = () => { state.thread = null; showConversation(); render(); $("text").focus(); };
// phones show one pane at a time (see the CSS): the list, or the conversation
function showConversation() { document.body.classList.remove("show-list"); }
$("show-list").onclick = () => document.body.classList.add("show-list");
if (!state.thread) document.body.classList.add("show-list");
$("new-channel").onsubmit = (e) => { e.preventDefault(); const n = $("channel-name").value.trim().replace(/[^A-Za-z0-9_.-]/g, "-").slice(0, 64); if (n) { state.channel = n; state.thread = null; $("channel-name").value = ""; render(); } };
$("sign-out").onclick = async () => {
  const r = await fetch("/logout", { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
  const next = r.ok ? (await r.json()).next : null;
  location.href = typeof next === "string" && /^\/[^/\\]/.test(next) ? next : "/login";
};
api("/web/api/me").then((me) => {
  $("me").textContent = me.user;
  state.me = me.user;
  $("sign-out").hidden = !me.can_sign_out;
  $("agent-notice").hidden = !me.echo_agent;
  render();
});
