"""Operators who sign in as themselves (``GATEWAY_OPS_AUTH=oidc``): single sign-on for the
operator pages (``/ops``) and the admin API (``/api/v1``), with a role per person.

``GET /ops/login`` sends the browser to the web chat's OpenID Connect provider
(``GATEWAY_OIDC_*``; the protocol is ``gateway.http.oidc``) with ``state``, ``nonce`` and PKCE
kept in a short-lived signed cookie; ``GET /ops/login/callback`` checks them and the ID token,
works out the person's role and sets the operator session cookie (``gw_ops``: signed,
``HttpOnly``, ``SameSite=Strict``, ``Secure`` over https, ``SESSION_SECONDS``).
``POST /ops/logout`` clears it.

Roles, lowest first: ``viewer`` reads; ``operator`` also acts (approve, reload, retry,
schedules, the knowledge base, MCP); ``admin`` also erases and exports people (and whatever
touches people or budgets). A person's role is the highest of what ``GATEWAY_OPS_ROLES_CLAIM``
names in the ID token (read at sign-in) and of the lists ``GATEWAY_OPS_ADMINS`` /
``_OPERATORS`` / ``_VIEWERS`` (a verified e-mail or the subject; read on every request, so a
name taken off a list loses its role at once). Someone with no role is signed in and refused
(403) everywhere: fail closed.

The audit log names the person: ``oidc:<e-mail>`` (verified), else ``oidc:<subject>``. The
admin token keeps working beside the sign-in, for scripts, as the role ``admin`` and the actor
``admin:token``.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway import audit
from gateway.core.settings import Settings
from gateway.http.guard import page_headers
from gateway.http.oidc import Identity, OidcClient, OidcDenied, OidcUnavailable, Pending
from gateway.http.webauth import b64url, unb64url
from session_store.db import Database
from session_store.repos.accounts import AccountStore

log = structlog.get_logger(__name__)

Role = Literal["viewer", "operator", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "admin")
_RANK = {role: i for i, role in enumerate(ROLES)}

#: the operator session cookie
COOKIE = "gw_ops"
#: the sign-in under way (state, nonce, PKCE verifier), signed; only under /ops/login
PENDING_COOKIE = "gw_ops_oidc"
LOGIN = "/ops/login"
CALLBACK = "/ops/login/callback"
LOGOUT = "/ops/logout"
#: how long an operator's sign-in lasts
SESSION_SECONDS = 12 * 3600
#: how long a person may take at the provider's sign-in page
PENDING_SECONDS = 600
#: signed payloads start with these, so no cookie passes for another (or for the web chat's)
_SESSION_TAG = b"ops-session:"
_PENDING_TAG = b"ops-pending:"
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Principal:
    """Who calls the operator surface: the audit log's actor, and the role (None: none)."""

    actor: str
    role: Role | None


def required_role(method: str, path: str) -> Role:
    """The least role that may make this request: people (their export and erasure) need
    ``admin``; any other change ``operator``; reading ``viewer``."""
    if path == "/api/v1/people" or path.startswith("/api/v1/people/"):
        return "admin"
    if method.upper() in _SAFE and path != "/mcp":
        return "viewer"
    return "operator"


def allows(role: Role | None, needed: Role) -> bool:
    return role is not None and _RANK[role] >= _RANK[needed]


class RoleRules:
    """Who has which role: a claim of the ID token, and lists of people."""

    def __init__(
        self,
        *,
        claim: str | None,
        admins: Iterable[str] = (),
        operators: Iterable[str] = (),
        viewers: Iterable[str] = (),
    ) -> None:
        self.claim = claim
        self._lists: list[tuple[Role, frozenset[str]]] = [
            ("admin", _names(admins)),
            ("operator", _names(operators)),
            ("viewer", _names(viewers)),
        ]

    def from_claim(self, claims: Mapping[str, Any]) -> tuple[Role, ...]:
        """The role names in the configured claim (a string or a list of strings)."""
        if not self.claim:
            return ()
        value = claims.get(self.claim)
        values = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        return tuple(v for v in ROLES if v in {str(x).strip().lower() for x in values})

    def role(self, *, subject: str, email: str | None, claimed: Iterable[str]) -> Role | None:
        """The highest role the lists give this person or the claim named, or None."""
        keys = {subject.lower()} | ({email.lower()} if email else set())
        found: set[Role] = {r for r in ROLES if r in set(claimed)}
        found |= {role for role, names in self._lists if keys & names}
        best = [r for r in ROLES if r in found]
        return best[-1] if best else None


def _names(values: Iterable[str]) -> frozenset[str]:
    return frozenset(v.strip().lower() for v in values if v.strip())


def actor_of(identity: Identity) -> str:
    """``oidc:<verified e-mail>``, else ``oidc:<subject>``."""
    if identity.email and identity.email_verified:
        return f"oidc:{identity.email}"
    return f"oidc:{identity.subject}"


class OpsSignIn:
    """The sign-in routes under ``/ops`` and the session cookie they set."""

    def __init__(self, oidc: OidcClient, rules: RoleRules, db: Database) -> None:
        self._oidc = oidc
        self.rules = rules
        self._db = db
        # the web chat's cookie key, shared by the replicas through the database
        self._accounts = AccountStore(db)
        self._key: bytes | None = None

    @classmethod
    def from_settings(cls, settings: Settings, db: Database) -> OpsSignIn | None:
        """The sign-in ``GATEWAY_OPS_AUTH=oidc`` asks for, with the web chat's provider; None
        for ``token``."""
        if settings.ops.gateway_ops_auth != "oidc":
            return None
        oidc = OidcClient.from_settings(settings, CALLBACK)
        rules = RoleRules(
            claim=settings.ops.gateway_ops_roles_claim,
            admins=settings.ops.gateway_ops_admins,
            operators=settings.ops.gateway_ops_operators,
            viewers=settings.ops.gateway_ops_viewers,
        )
        return cls(oidc, rules, db)

    # --- who is asking ---------------------------------------------------------------------

    async def principal(self, cookie: str | None) -> Principal | None:
        """The signed-in person of ``cookie`` with their role now, or None (not signed in)."""
        payload = await self._unsigned(cookie, _SESSION_TAG)
        if payload is None:
            return None
        try:
            data = json.loads(payload)
            actor, subject, email = str(data["a"]), str(data["s"]), data["e"]
            claimed, issued = [str(r) for r in data["r"]], float(data["i"])
        except (ValueError, KeyError, TypeError):
            return None
        if issued + SESSION_SECONDS < time.time() or issued > time.time() + 60:
            return None
        email = email if isinstance(email, str) else None
        return Principal(actor, self.rules.role(subject=subject, email=email, claimed=claimed))

    # --- signing ---------------------------------------------------------------------------

    async def _signing_key(self) -> bytes:
        if self._key is None:
            key = await self._accounts.signing_key(secrets.token_bytes(32))
            # its own key, derived: an operator cookie is never a web chat cookie
            self._key = hmac.new(key, b"gateway operator sign-in", hashlib.sha256).digest()
        return self._key

    async def _signed(self, tag: bytes, payload: bytes) -> str:
        data = tag + payload
        mac = hmac.new(await self._signing_key(), data, hashlib.sha256).digest()
        return f"{b64url(data)}.{b64url(mac)}"

    async def _unsigned(self, cookie: str | None, tag: bytes) -> bytes | None:
        if not cookie or len(cookie) > 4096:
            return None
        data_b64, _, mac_b64 = cookie.partition(".")
        try:
            data, mac = unb64url(data_b64), unb64url(mac_b64)
        except ValueError:
            return None
        good = hmac.new(await self._signing_key(), data, hashlib.sha256).digest()
        if not hmac.compare_digest(mac, good) or not data.startswith(tag):
            return None
        return data[len(tag) :]

    # --- the routes ------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return [
            Route(LOGIN, self._begin, methods=["GET"]),
            Route(CALLBACK, self._callback, methods=["GET"]),
            Route(LOGOUT, self._logout, methods=["POST"]),
        ]

    async def _begin(self, request: Request) -> Response:
        if request.query_params.get("signed_out"):
            return _page(request, 200, "Signed out", "You are signed out of the operator pages.")
        try:
            url, pending = await self._oidc.begin()
        except OidcUnavailable as exc:
            log.warning("ops_oidc_unavailable", reason=exc.reason)
            return _page(request, 502, "Sign-in unavailable", exc.reason)
        payload = json.dumps(
            {"s": pending.state, "n": pending.nonce, "v": pending.verifier, "t": time.time()},
            separators=(",", ":"),
        ).encode()
        response = RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})
        response.set_cookie(
            PENDING_COOKIE,
            await self._signed(_PENDING_TAG, payload),
            max_age=PENDING_SECONDS,
            path=LOGIN,
            httponly=True,
            # Lax: the provider's redirect back is a top-level GET, which Lax cookies follow
            samesite="lax",
            secure=self._secure(request),
        )
        return response

    async def _pending(self, request: Request) -> Pending | None:
        payload = await self._unsigned(request.cookies.get(PENDING_COOKIE), _PENDING_TAG)
        if payload is None:
            return None
        try:
            data = json.loads(payload)
            pending = Pending(state=str(data["s"]), nonce=str(data["n"]), verifier=str(data["v"]))
            started = float(data["t"])
        except (ValueError, KeyError, TypeError):
            return None
        return pending if started + PENDING_SECONDS >= time.time() else None

    async def _callback(self, request: Request) -> Response:
        response = await self._outcome(request)
        # the pending sign-in is used up whatever happened
        response.delete_cookie(
            PENDING_COOKIE,
            path=LOGIN,
            httponly=True,
            samesite="lax",
            secure=self._secure(request),
        )
        return response

    async def _outcome(self, request: Request) -> Response:
        params = request.query_params
        if "error" in params:
            error = re.sub(r"[^A-Za-z0-9_.-]", "?", params.get("error", ""))[:64]
            return await self._refused(request, "?", f"the provider said {error}")
        pending = await self._pending(request)
        state = params.get("state", "")
        if pending is None or not hmac.compare_digest(
            pending.state.encode(), state.encode("utf-8", "replace")
        ):
            return await self._refused(request, "?", "the sign-in state does not match")
        code = params.get("code", "")
        if not code or len(code) > 2048:
            return await self._refused(request, "?", "the provider sent no code")
        try:
            identity = await self._oidc.finish(code, pending)
        except OidcDenied as exc:
            return await self._refused(request, "?", exc.reason)
        except OidcUnavailable as exc:
            log.warning("ops_oidc_unavailable", reason=exc.reason)
            return _page(request, 502, "Sign-in unavailable", exc.reason)
        actor = actor_of(identity)
        email = identity.email if identity.email_verified else None
        claimed = self.rules.from_claim(identity.claims)
        role = self.rules.role(subject=identity.subject, email=email, claimed=claimed)
        if role is None:
            # fail closed: a person the rules give no role is not let in at all
            return await self._refused(request, actor, "no operator role for this person")
        payload = json.dumps(
            {"a": actor, "s": identity.subject, "e": email, "r": claimed, "i": time.time()},
            separators=(",", ":"),
        ).encode()
        log.info("ops_sign_in", actor=actor, role=role)
        await audit.record(
            self._db, "ops.sign_in", ("operator", actor), actor=actor, details={"role": role}
        )
        response = RedirectResponse("/ops", status_code=303, headers={"Cache-Control": "no-store"})
        response.set_cookie(
            COOKIE,
            await self._signed(_SESSION_TAG, payload),
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="strict",
            secure=self._secure(request),
        )
        return response

    async def _refused(self, request: Request, actor: str, reason: str) -> Response:
        log.info("ops_sign_in_refused", actor=actor, reason=reason)
        await audit.record(
            self._db,
            "ops.sign_in",
            ("operator", actor),
            outcome="denied",
            reason=f"oidc: {reason}",
            actor=actor if actor.startswith("oidc:") else "anonymous",
        )
        return _page(request, 403, "Sign-in refused", reason)

    async def _logout(self, request: Request) -> Response:
        person = await self.principal(request.cookies.get(COOKIE))
        if person is not None:
            await audit.record(
                self._db, "ops.sign_out", ("operator", person.actor), actor=person.actor
            )
        response = JSONResponse({"status": "signed out", "next": f"{LOGIN}?signed_out=1"})
        response.delete_cookie(
            COOKIE, path="/", httponly=True, samesite="strict", secure=self._secure(request)
        )
        return response

    def _secure(self, request: Request) -> bool:
        return request.url.scheme == "https" or self._oidc.redirect_uri.startswith("https://")


def _page(request: Request, status: int, title: str, text: str) -> Response:
    """A short answer a browser shows as a page and a script reads as JSON."""
    if "text/html" not in request.headers.get("accept", ""):
        key = "status" if status < 400 else "error"
        return JSONResponse({key: text}, status_code=status, headers={"Cache-Control": "no-store"})
    link = f'<p><a href="{LOGIN}">Sign in</a></p>'
    body = (
        f'<!doctype html><html lang="en"><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{link}</html>"
    )
    return HTMLResponse(
        body, status_code=status, headers={**page_headers(), "Cache-Control": "no-store"}
    )
