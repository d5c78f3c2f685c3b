"use strict";
// The knowledge base's operator page: documents with their ingest state, upload, reindex,
// delete, and search. API content is only ever inserted with textContent.

function source(h) {
  let label = h.document_name;
  if (h.page !== null && h.page !== undefined) label += ", p. " + h.page;
  if (h.section) label += " — " + h.section;
  return label;
}

async function loadDocuments() {
  const kb = $("filter").value.trim();
  const docs = await api("/api/v1/kb/documents" + (kb ? "?kb=" + encodeURIComponent(kb) : ""));
  const rows = $("doc-rows");
  rows.replaceChildren();
  for (const d of docs) {
    const tr = el("tr");
    const state = el("span", "badge " + d.state, d.state === "failed" ? "failed: " + d.error : d.state);
    const actions = el("td");
    const reindex = el("button", "secondary", "Reindex");
    reindex.type = "button";
    reindex.addEventListener("click", () =>
      api("/api/v1/kb/documents/" + d.id + "/reindex", { method: "POST" }).then(loadDocuments).catch(notice));
    const remove = el("button", "secondary", "Delete");
    remove.type = "button";
    remove.addEventListener("click", () => {
      if (!confirm("Delete " + d.name + "? Earlier answers keep their citations.")) return;
      api("/api/v1/kb/documents/" + d.id, { method: "DELETE" }).then(loadDocuments).catch(notice);
    });
    actions.append(reindex, " ", remove);
    const stateCell = el("td");
    stateCell.append(state);
    tr.append(el("td", null, d.id), el("td", null, d.kb_name), el("td", null, d.name), stateCell,
      el("td", null, d.pages === null ? "" : d.pages), el("td", null, d.chunk_count),
      el("td", null, d.access_count), el("td", null, new Date(d.updated_at).toLocaleString()), actions);
    rows.append(tr);
  }
}

async function upload(ev) {
  ev.preventDefault();
  const file = $("file").files[0];
  if (!file) { notice("choose a file first"); return; }
  // the body is the file itself, as application/octet-stream (the only type the upload
  // route takes: no foreign page can send it without a preflight); its real type as ?type=
  const params = "?name=" + encodeURIComponent(file.name) + "&kb=" + encodeURIComponent($("kb").value.trim() || "default") + "&type=" + encodeURIComponent(file.type || "");
  await api("/api/v1/kb/documents" + params, {
    method: "POST",
    body: file,
    headers: { "Content-Type": "application/octet-stream" },
  });
  $("file").value = "";
  await loadDocuments();
}

// operator knowledge bases assigned to chats: every thread of the chat searches them
async function loadAssignments() {
  const found = await api("/api/v1/kb/assignments");
  const rows = $("assign-rows");
  rows.replaceChildren();
  for (const a of found) {
    // written as the gateway writes a chat (SessionKey.chat_text): "%" and ":" in the
    // platform and chat escaped ("%25", "%3A"), the scope's ":" kept
    const esc = (t, colon = true) => { const e = String(t).replace(/%/g, "%25"); return colon ? e.replace(/:/g, "%3A") : e; };
    const chat = [esc(a.platform), esc(a.scope, false), esc(a.chat_id)].join(":");
    const remove = el("button", "secondary", "Unassign");
    remove.type = "button";
    remove.addEventListener("click", () =>
      api("/api/v1/kb/assignments?kb=" + encodeURIComponent(a.kb_name) + "&chat=" + encodeURIComponent(chat), { method: "DELETE" })
        .then(loadAssignments).catch(notice));
    const actions = el("td");
    actions.append(remove);
    const tr = el("tr");
    tr.append(el("td", null, a.kb_name), el("td", "mono", chat), el("td", null, new Date(a.created_at).toLocaleString()), actions);
    rows.append(tr);
  }
}

async function assign(ev) {
  ev.preventDefault();
  await api("/api/v1/kb/assignments", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ kb: $("assign-kb").value.trim(), chat: $("assign-chat").value.trim() }),
  });
  $("assign-chat").value = "";
  await loadAssignments();
}

async function search(ev) {
  ev.preventDefault();
  const q = $("q").value.trim();
  if (!q) return;
  const kb = $("kb").value.trim() || "default";
  const hits = await api("/api/v1/kb/search?q=" + encodeURIComponent(q) + "&kb=" + encodeURIComponent(kb) + "&limit=10");
  const rows = $("hit-rows");
  rows.replaceChildren();
  hits.forEach((h, i) => {
    const tr = el("tr");
    tr.append(el("td", null, i + 1), el("td", null, source(h)), el("td", null, h.score.toFixed(4)),
      el("td", null, h.content.length > 400 ? h.content.slice(0, 400) + "…" : h.content));
    rows.append(tr);
  });
}

$("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("auth").style.display = "none";
  loadDocuments().catch(notice);
  loadAssignments().catch(notice);
});
$("upload").addEventListener("submit", (ev) => upload(ev).catch(notice));
$("search").addEventListener("submit", (ev) => search(ev).catch(notice));
$("filter").addEventListener("change", () => loadDocuments().catch(notice));
$("assign").addEventListener("submit", (ev) => assign(ev).catch(notice));
loadDocuments().catch(notice);
loadAssignments().catch(notice);
setInterval(() => { if (!document.hidden) loadDocuments().catch(notice); }, 3000);
