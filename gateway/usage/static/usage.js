"use strict";
// The usage operator page: spend per day as an SVG bar chart, top people, places and
// models, and the budgets. API content is only ever inserted with textContent.

const SVG = "http://www.w3.org/2000/svg";
const TOP = 10;

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

// A sum in as many digits as it needs (as gateway.usage.report.amount): at least two
// decimals, up to six, or three significant digits when smaller; never rounded to 0.00.
function money(v) {
  if (v === null || v === undefined) return "-";
  const n = Number(v);
  if (!isFinite(n) || n === 0) return n === 0 ? "0.00" : String(v);
  const first = Math.floor(Math.log10(Math.abs(n)));
  const places = Math.min(Math.max(2, 6, 2 - first), 20);
  let text = n.toFixed(places);
  // trailing zeros past the second decimal say nothing
  while (/\.\d{3,}$/.test(text) && text.endsWith("0")) text = text.slice(0, -1);
  return text;
}

// a bar's label, in the room a bar has: two decimals, or one significant digit below a cent
// (never 0.00 for a day that spent something); its title has the whole sum
function short(v) {
  const n = Number(v);
  return n === 0 || Math.abs(n) >= 0.01 ? n.toFixed(2) : String(Number(n.toPrecision(1)));
}

function chart(rows) {
  const box = $("chart");
  box.replaceChildren();
  if (!rows.length) { box.appendChild(el("p", "muted", "No usage in this range.")); return; }
  const byCost = rows.some((r) => r.cost);
  const value = (r) => byCost ? (r.cost || 0) : r.tokens;
  const max = Math.max(...rows.map(value), 1e-9);
  const bar = 28, gap = 8, height = 180, top = 20, bottom = 40;
  const width = Math.max(rows.length * (bar + gap) + gap, 320);
  const s = svg("svg", { width, height: height + top + bottom, role: "img",
    "aria-label": "spend per day" });
  rows.forEach((r, i) => {
    const h = Math.max(1, Math.round(value(r) / max * height));
    const x = gap + i * (bar + gap);
    const rect = svg("rect", { x, y: top + height - h, width: bar, height: h, fill: "#3b6fb6" });
    const title = svg("title");
    title.textContent = r.key + ": " + (byCost ? money(r.cost) : r.tokens + " tokens");
    rect.appendChild(title);
    s.appendChild(rect);
    const label = svg("text", { x: x + bar / 2, y: top + height + 14, "text-anchor": "middle",
      "font-size": 10 });
    label.textContent = r.key.slice(5);
    s.appendChild(label);
    const amount = svg("text", { x: x + bar / 2, y: top + height - h - 4, "text-anchor": "middle",
      "font-size": 9 });
    amount.textContent = byCost ? short(r.cost || 0) : String(r.tokens);
    s.appendChild(amount);
  });
  box.appendChild(s);
  box.appendChild(el("p", "muted", byCost ? "cost per day (UTC)" : "tokens per day (UTC)"));
}

function table(id, rows, detail) {
  const body = $(id);
  body.replaceChildren();
  for (const r of rows.slice(0, TOP)) {
    const tr = el("tr");
    for (const v of [r.key, detail(r), money(r.cost), r.tokens, r.calls]) tr.appendChild(el("td", null, v));
    body.appendChild(tr);
  }
}

function budgets(items) {
  const body = $("budget-rows");
  body.replaceChildren();
  for (const b of items) {
    const tr = el("tr");
    const spent = "spent_cost" in b ? money(b.spent_cost) + " / " + b.spent_tokens + " tokens" : "";
    const left = "left_cost" in b ? money(b.left_cost) : ("left_tokens" in b ? b.left_tokens + " tokens" : "");
    for (const v of [b.limit, b.per, money(b.cost), b.tokens === null ? "-" : b.tokens, spent, left]) {
      tr.appendChild(el("td", null, v));
    }
    body.appendChild(tr);
  }
}

async function load() {
  const q = new URLSearchParams();
  if ($("since").value) q.set("since", $("since").value);
  if ($("until").value) q.set("until", $("until").value);
  const get = (by) => { const p = new URLSearchParams(q); p.set("by", by); return api("/api/v1/usage?" + p); };
  try {
    const [days, people, places, models] = await Promise.all(
      ["day", "person", "place", "model"].map(get));
    chart(days.rows);
    budgets(days.budgets);
    table("person-rows", people.rows, (r) => r.accounts.join(", "));
    table("place-rows", places.rows, () => "");
    table("model-rows", models.rows, () => "");
  } catch (err) {
    $("notice").textContent = String((err && err.message) || err);
  }
}

$("auth").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("auth").style.display = "none";
  load();
});
$("range").addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
load();
