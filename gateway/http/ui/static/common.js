"use strict";
// What every operator page shares: the admin token kept for this tab, an element builder, the
// admin API call (401 shows the token form, or goes to the sign-in), and the notice line.
// Loaded before each page's own script. API content is only ever inserted with textContent, never innerHTML.

const TOKEN_KEY = "chat-gateway-admin-token";
const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(message, status) { super(message); this.status = status; }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

async function api(path, opts) {
  const options = Object.assign({}, opts || {});
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  options.headers = headers;
  const res = await fetch(path, options);
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (res.status === 401) {
    // operators sign in as themselves (GATEWAY_OPS_AUTH=oidc): off to the sign-in, and back
    if (!token && body && String(body.detail || "").indexOf("/ops/login") >= 0) {
      location.href = "/ops/login";
    }
    $("auth").style.display = "block";
    throw new ApiError((body && body.detail) || "an admin token is required", 401);
  }
  if (!res.ok) throw new ApiError((body && (body.detail || body.title)) || "HTTP " + res.status, res.status);
  $("notice").textContent = "";
  return body;
}

function notice(err) { $("notice").textContent = String((err && err.message) || err); }
