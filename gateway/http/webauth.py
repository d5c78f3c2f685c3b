"""Who is using the web chat (``GATEWAY_WEB_AUTH``).

* ``none``: one local user, ``local``. Settings allow it only on a loopback bind.
* ``accounts``: people in the ``web_accounts`` table (``gateway users add``), passwords hashed
  with argon2id. ``POST /login`` checks a password (attempts rate limited per client address
  and per name) and sets a signed session cookie: ``HttpOnly``, ``SameSite=Lax``, ``Secure``
  when the request came over https. ``POST /logout`` clears it and revokes every cookie the
  person was given until then.
* ``proxy``: the name in ``GATEWAY_WEB_AUTH_HEADER``, believed only when the connection comes
  from an address in ``GATEWAY_TRUSTED_PROXIES`` (oauth2-proxy, Authelia, Cloudflare Access).
* ``oidc``: single sign-on. ``GET /login`` sends the browser to the OpenID Connect provider
  (``GATEWAY_OIDC_ISSUER``; the protocol is in ``gateway.http.oidc``) with ``state``, ``nonce``
  and a PKCE challenge kept in a short-lived signed cookie; ``GET /login/callback`` checks
  them, lets in the allowed e-mail domains and groups, and signs the person in with the same
  session cookie as ``accounts``, as the web account linked to the provider's subject (made
  on the first sign-in, without a password).

The web chat adapter asks ``person(request)`` on every call and never takes a name from the
browser: a message's sender and a vote's voter are the signed-in person.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import ipaddress
import json
import math
import re
import secrets
import time
from collections import deque
from importlib import resources
from typing import Literal

import structlog
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from gateway import audit
from gateway.core.settings import Settings
from gateway.http.guard import PEER, client_in, page_headers
from gateway.http.oidc import Identity, OidcClient, OidcDenied, OidcUnavailable, Pending, allowed
from session_store.db import Database
from session_store.repos.accounts import AccountStore
from session_store.store import Store

log = structlog.get_logger(__name__)

AuthMode = Literal["none", "accounts", "proxy", "oidc"]
COOKIE = "gw_session"
#: the OpenID Connect sign-in under way (state, nonce, PKCE verifier), signed; only /login*
OIDC_COOKIE = "gw_oidc"
#: how long a person may take at the provider's sign-in page
OIDC_PENDING_SECONDS = 600
#: the path the provider sends the browser back to (after GATEWAY_PUBLIC_URL)
OIDC_CALLBACK = "/login/callback"
#: how long a sign-in lasts
SESSION_SECONDS = 7 * 24 * 3600
#: failed sign-ins allowed per client address, and per name, in FAIL_WINDOW seconds
MAX_FAILURES = 5
FAIL_WINDOW = 300.0
LOCAL_USER = "local"
#: a person's name: what the accounts, the proxy header and the private channel accept
PERSON_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63}$")
MIN_PASSWORD = 8
#: password checks running at once (argon2id takes tens of milliseconds of CPU each)
VERIFY_CONCURRENCY = 2
_HASHER = PasswordHasher()
_dummy_hash: list[str] = []


def _dummy() -> str:
    """Checked against when the name is unknown, so an unknown name costs as much as a wrong
    password (made on first use: hashing is slow on purpose)."""
    if not _dummy_hash:
        _dummy_hash.append(_HASHER.hash(secrets.token_hex(16)))
    return _dummy_hash[0]


def valid_name(name: str) -> bool:
    return bool(PERSON_NAME.match(name))


def hash_password(password: str) -> str:
    """An argon2id PHC string for ``password``."""
    return _HASHER.hash(password)


def private_channel(person: str) -> str:
    """The channel only ``person`` sees."""
    return f"~{person}"


class _Failures:
    """Failed sign-ins in a sliding window per key (client address, name); bounded."""

    def __init__(self, limit: int, window: float, max_keys: int = 10_000) -> None:
        self._limit = limit
        self._window = window
        self._max_keys = max_keys
        self._seen: dict[str, deque[float]] = {}

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._seen.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self._window:
            times.popleft()
        if not times:
            del self._seen[key]
        return times

    def blocked_for(self, key: str) -> float:
        """Seconds until ``key`` may try again (0: now)."""
        now = time.monotonic()
        times = self._recent(key, now)
        if len(times) < self._limit:
            return 0.0
        return max(0.0, times[0] + self._window - now)

    def add(self, key: str) -> None:
        now = time.monotonic()
        if len(self._seen) >= self._max_keys and key not in self._seen:
            # drop the oldest keys: memory stays bounded under a spray of addresses
            for old in list(self._seen)[: self._max_keys // 10]:
                del self._seen[old]
        self._seen.setdefault(key, deque()).append(now)

    def clear(self, key: str) -> None:
        self._seen.pop(key, None)


class WebIdentity:
    def __init__(
        self,
        mode: AuthMode,
        *,
        accounts: AccountStore | None = None,
        header: str = "X-Forwarded-User",
        trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (),
        audit_db: Database | None = None,
        oidc: OidcClient | None = None,
        oidc_domains: tuple[str, ...] = (),
        oidc_groups: tuple[str, ...] = (),
    ) -> None:
        self.mode: AuthMode = mode
        self._oidc = oidc
        self._oidc_domains = list(oidc_domains)
        self._oidc_groups = list(oidc_groups)
        self._accounts = accounts
        #: sign-ins (failed ones too) and sign-outs go to the audit log
        self._audit_db = audit_db
        self._header = header.lower()
        self._trusted = trusted
        self._key: bytes | None = None
        self._failures = _Failures(MAX_FAILURES, FAIL_WINDOW)
        #: password checks are slow on purpose: a flood of sign-ins waits here instead of
        #: taking every CPU
        self._verifying = asyncio.Semaphore(VERIFY_CONCURRENCY)
        self._login_page = (
            resources.files("gateway.http.ui")
            .joinpath("static/login.html")
            .read_text(encoding="utf-8")
        )
        self._login_headers = page_headers(
            scripts=re.findall(r"<script>(.*?)</script>", self._login_page, flags=re.DOTALL),
            styles=re.findall(r"<style>(.*?)</style>", self._login_page, flags=re.DOTALL),
        )

    @classmethod
    def from_settings(cls, settings: Settings, store: Store | None) -> WebIdentity:
        """The identity provider the settings ask for; without a store (``gateway doctor``,
        which builds surfaces only to check them) nobody can sign in with an account."""
        oidc = None
        if settings.gateway_web_auth == "oidc":
            oidc = OidcClient.from_settings(settings, OIDC_CALLBACK)
        return cls(
            settings.gateway_web_auth,
            accounts=None if store is None else AccountStore(store.db),
            audit_db=None if store is None else store.db,
            header=settings.gateway_web_auth_header,
            trusted=tuple(
                ipaddress.ip_network(c, strict=False) for c in settings.gateway_trusted_proxies
            ),
            oidc=oidc,
            oidc_domains=tuple(settings.gateway_oidc_allowed_domains),
            oidc_groups=tuple(settings.gateway_oidc_allowed_groups),
        )

    @property
    def signs_in(self) -> bool:
        """Whether the gateway itself signs people in (and out): a signed-out browser is sent
        to ``/login``."""
        return self.mode in ("accounts", "oidc")

    # --- who is asking ---------------------------------------------------------------------

    async def person(self, request: Request) -> str | None:
        """The signed-in person's name, or ``None`` (answer 401)."""
        if self.mode == "none":
            return LOCAL_USER
        if self.mode == "proxy":
            peer = peer_address(request)
            if not client_in(peer, self._trusted):
                return None
            name = request.headers.get(self._header, "").strip()
            return name if valid_name(name) else None
        return await self._cookie_person(request.cookies.get(COOKIE))

    async def _cookie_person(self, cookie: str | None) -> str | None:
        payload = await self._unsigned(cookie)
        if payload is None or self._accounts is None:
            return None
        try:
            data = json.loads(payload)
            name, issued = str(data["n"]), float(data["i"])
        except (ValueError, KeyError, TypeError):
            return None
        if issued + SESSION_SECONDS < time.time():
            return None
        account = await self._accounts.get(name)
        if account is None or issued < account.sessions_valid_after.timestamp():
            return None  # removed, signed out, or given a new password since
        return account.name

    async def _signing_key(self) -> bytes:
        if self._key is None:
            assert self._accounts is not None
            self._key = await self._accounts.signing_key(secrets.token_bytes(32))
        return self._key

    @staticmethod
    def _mac(key: bytes, payload: bytes) -> bytes:
        return hmac.new(key, payload, hashlib.sha256).digest()

    async def _cookie_for(self, name: str) -> str:
        payload = json.dumps({"n": name, "i": time.time()}, separators=(",", ":")).encode()
        return await self._signed(payload)

    async def _signed(self, payload: bytes) -> str:
        mac = self._mac(await self._signing_key(), payload)
        return f"{b64url(payload)}.{b64url(mac)}"

    async def _unsigned(self, cookie: str | None) -> bytes | None:
        """The payload of a cookie this gateway signed, or ``None``."""
        if not cookie or len(cookie) > 1024 or self._accounts is None:
            return None
        payload_b64, _, mac_b64 = cookie.partition(".")
        try:
            payload = unb64url(payload_b64)
            mac = unb64url(mac_b64)
        except ValueError:
            return None
        if not hmac.compare_digest(mac, self._mac(await self._signing_key(), payload)):
            return None
        return payload

    # --- sign-in and sign-out (accounts) ---------------------------------------------------

    def routes(self) -> list[Route]:
        # /logout opened by hand (a typed address, an old bookmark) lands on the chat, which
        # sends a signed-out person on to the sign-in page: never a bare 404
        back = Route("/logout", _back_to_chat, methods=["GET"])
        if self.mode == "oidc":
            return [
                Route("/login", self._oidc_begin, methods=["GET"]),
                Route(OIDC_CALLBACK, self._oidc_callback, methods=["GET"]),
                Route("/logout", self._logout, methods=["POST"]),
                back,
            ]
        if self.mode != "accounts":
            # nothing to sign out of: the chat itself, or the sign-in proxy's own page
            return [back, Route("/logout", _back_to_chat, methods=["POST"])]
        return [
            Route("/login", self._login_page_route, methods=["GET"]),
            Route("/login", self._login, methods=["POST"]),
            Route("/logout", self._logout, methods=["POST"]),
            back,
        ]

    async def _login_page_route(self, request: Request) -> Response:
        return HTMLResponse(self._login_page, headers=self._login_headers)

    async def _login(self, request: Request) -> Response:
        assert self._accounts is not None
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            body = None
        if (
            not isinstance(body, dict)
            or set(body) != {"name", "password"}
            or not isinstance(body["name"], str)
            or not isinstance(body["password"], str)
            or len(body["password"]) > 1024
            or not _utf8(body["name"])
            or not _utf8(body["password"])
        ):
            return JSONResponse({"error": 'send {"name": ..., "password": ...}'}, status_code=422)
        name, password = body["name"].strip(), body["password"]
        client = request.client.host if request.client else "-"
        wait = max(
            self._failures.blocked_for(f"ip:{client}"),
            self._failures.blocked_for(f"name:{name.lower()}"),
        )
        if wait > 0:
            log.warning("web_login_rate_limited", client=client)
            await self._audit_sign_in(name, "denied", "too many attempts")
            return JSONResponse(
                {"error": f"Too many attempts: try again in {wait_words(wait)}"},
                status_code=429,
                headers={"Retry-After": str(math.ceil(wait))},
            )
        account = await self._accounts.get(name) if valid_name(name) else None
        async with self._verifying:
            ok = await asyncio.to_thread(
                _verify, account.password_hash if account else _dummy(), password
            )
        if account is None or not ok:
            self._failures.add(f"ip:{client}")
            self._failures.add(f"name:{name.lower()}")
            log.info("web_login_failed", client=client)
            await self._audit_sign_in(name, "denied", "wrong name or password")
            return JSONResponse({"error": "wrong name or password"}, status_code=401)
        self._failures.clear(f"name:{name.lower()}")
        log.info("web_login", user=account.name, client=client)
        await self._audit_sign_in(account.name, "ok", None)
        response = JSONResponse({"user": account.name})
        await self._sign_in(response, request, account.name)
        return response

    async def _logout(self, request: Request) -> Response:
        assert self._accounts is not None
        name = await self._cookie_person(request.cookies.get(COOKIE))
        if name is not None:
            await self._accounts.revoke_sessions(name)
            log.info("web_logout", user=name)
            if self._audit_db is not None:
                await audit.record(
                    self._audit_db, "web.sign_out", ("web.account", name), actor=f"web:{name}"
                )
        # with single sign-on, /login would sign the person straight back in at the provider:
        # the page says "signed out" and offers to sign in again instead
        after = "/login?signed_out=1" if self.mode == "oidc" else "/login"
        response = JSONResponse({"status": "signed out", "next": after})
        response.delete_cookie(
            COOKIE, path="/", httponly=True, samesite="lax", secure=self._secure(request)
        )
        return response

    # --- single sign-on (oidc) -------------------------------------------------------------

    async def _oidc_begin(self, request: Request) -> Response:
        if request.query_params.get("signed_out"):
            return _page(request, 200, "Signed out", "You are signed out of the chat.")
        assert self._oidc is not None
        try:
            url, pending = await self._oidc.begin()
        except OidcUnavailable as exc:
            log.warning("web_oidc_unavailable", reason=exc.reason)
            return _page(request, 502, "Sign-in unavailable", exc.reason, retry=False)
        payload = json.dumps(
            {"s": pending.state, "n": pending.nonce, "v": pending.verifier, "t": time.time()},
            separators=(",", ":"),
        ).encode()
        response = RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})
        response.set_cookie(
            OIDC_COOKIE,
            await self._signed(_PENDING_TAG + payload),
            max_age=OIDC_PENDING_SECONDS,
            path="/login",
            httponly=True,
            # Lax: the provider's redirect back is a top-level GET, which Lax cookies follow
            samesite="lax",
            secure=self._secure(request),
        )
        return response

    async def _pending(self, request: Request) -> Pending | None:
        payload = await self._unsigned(request.cookies.get(OIDC_COOKIE))
        if payload is None or not payload.startswith(_PENDING_TAG):
            return None
        try:
            data = json.loads(payload[len(_PENDING_TAG) :])
            pending = Pending(state=str(data["s"]), nonce=str(data["n"]), verifier=str(data["v"]))
            started = float(data["t"])
        except (ValueError, KeyError, TypeError):
            return None
        if started + OIDC_PENDING_SECONDS < time.time():
            return None
        return pending

    async def _oidc_callback(self, request: Request) -> Response:
        response = await self._oidc_outcome(request)
        # the pending sign-in is used up whatever happened: a second try starts again
        response.delete_cookie(
            OIDC_COOKIE,
            path="/login",
            httponly=True,
            samesite="lax",
            secure=self._secure(request),
        )
        return response

    async def _oidc_outcome(self, request: Request) -> Response:
        assert self._oidc is not None and self._accounts is not None
        params = request.query_params
        client = request.client.host if request.client else "-"
        if "error" in params:
            # checked before the state: some providers leave the state off their error
            # answers (RFC 6749 4.1.2.1 asks for it), and an error signs nobody in
            error = re.sub(r"[^A-Za-z0-9_.-]", "?", params.get("error", ""))[:64]
            return await self._oidc_refused(request, None, f"the provider said {error}")
        pending = await self._pending(request)
        state = params.get("state", "")
        if pending is None or not hmac.compare_digest(
            pending.state.encode(), state.encode("utf-8", "replace")
        ):
            # a forged or replayed callback, or a sign-in begun in another browser or too long
            # ago: nothing from this request is believed
            return await self._oidc_refused(request, None, "the sign-in state does not match")
        code = params.get("code", "")
        if not code or len(code) > 2048:
            return await self._oidc_refused(request, None, "the provider sent no code")
        try:
            identity = await self._oidc.finish(code, pending)
        except OidcDenied as exc:
            return await self._oidc_refused(request, None, exc.reason)
        except OidcUnavailable as exc:
            log.warning("web_oidc_unavailable", reason=exc.reason)
            return _page(request, 502, "Sign-in unavailable", exc.reason, retry=False)
        name = oidc_name(identity)
        why = allowed(identity, domains=self._oidc_domains, groups=self._oidc_groups)
        if why is not None:
            return await self._oidc_refused(request, name, why)
        try:
            account = await self._accounts.for_subject(identity.issuer, identity.subject, name)
        except ValueError:
            return await self._oidc_refused(request, name, "no free account name")
        log.info("web_login", user=account.name, client=client, method="oidc")
        await self._audit_sign_in(account.name, "ok", None)
        response = RedirectResponse("/", status_code=303, headers={"Cache-Control": "no-store"})
        await self._sign_in(response, request, name=account.name)
        return response

    async def _oidc_refused(self, request: Request, name: str | None, reason: str) -> Response:
        client = request.client.host if request.client else "-"
        log.info("web_login_failed", client=client, method="oidc", reason=reason)
        await self._audit_sign_in(name or "?", "denied", f"oidc: {reason}")
        return _page(request, 403, "Sign-in refused", reason)

    async def _sign_in(self, response: Response, request: Request, name: str) -> None:
        """The session cookie on ``response``: ``name`` is signed in (a password or the
        provider said so)."""
        response.set_cookie(
            COOKIE,
            await self._cookie_for(name),
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="lax",
            secure=self._secure(request),
        )

    def _secure(self, request: Request) -> bool:
        """Cookies only over https: the request's scheme, or the public address the provider
        sends people back to (behind a proxy that ends TLS)."""
        redirect = self._oidc.redirect_uri if self._oidc is not None else ""
        return request.url.scheme == "https" or redirect.startswith("https://")

    async def _audit_sign_in(self, name: str, outcome: audit.Outcome, reason: str | None) -> None:
        if self._audit_db is None:
            return
        # a failed attempt's name is what was typed: kept only when it could be a name
        who = name if valid_name(name) else "?"
        await audit.record(
            self._audit_db,
            "web.sign_in",
            ("web.account", who),
            outcome=outcome,
            reason=reason,
            actor=f"web:{who}",
        )


#: signed pending sign-ins start with this, so one can never pass for a session cookie
_PENDING_TAG = b"oidc-pending:"
#: a name made from a provider's claims keeps room for a "-NNN" suffix
_OIDC_NAME_MAX = 56


def oidc_name(identity: Identity) -> str:
    """The web account name a subject asks for: its ``preferred_username`` or its e-mail's
    local part, cut down to what ``PERSON_NAME`` accepts (``user`` when nothing is left)."""
    raw = identity.preferred_username or (identity.email or "").partition("@")[0]
    name = re.sub(r"[^A-Za-z0-9_.@+-]+", "-", raw)
    name = re.sub(r"^[^A-Za-z0-9]+", "", name)[:_OIDC_NAME_MAX].rstrip("-")
    return name if valid_name(name) else "user"


def _page(request: Request, status: int, title: str, text: str, *, retry: bool = True) -> Response:
    """A short answer a browser shows as a page and a script reads as JSON."""
    if "text/html" not in request.headers.get("accept", ""):
        key = "status" if status < 400 else "error"
        return JSONResponse({key: text}, status_code=status, headers={"Cache-Control": "no-store"})
    link = '<p><a href="/login">Sign in again</a></p>' if retry else ""
    body = (
        f'<!doctype html><html lang="en"><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>{link}</html>"
    )
    return HTMLResponse(
        body, status_code=status, headers={**page_headers(), "Cache-Control": "no-store"}
    )


async def _back_to_chat(request: Request) -> Response:
    return RedirectResponse("/", status_code=303)


def peer_address(request: Request) -> str | None:
    """The address of the machine that connected (the proxy, when there is one)."""
    state = request.scope.get("state") or {}
    if PEER in state:
        peer = state[PEER]
        return peer if isinstance(peer, str) else None
    return request.client.host if request.client else None


def wait_words(seconds: float) -> str:
    """How long to wait, as a person says it: "40 seconds", "1 minute", "4 minutes"."""
    if seconds <= 60:
        whole = max(1, math.ceil(seconds))
        return f"{whole} second{'s' if whole != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def _utf8(text: str) -> bool:
    """Text a password hasher and PostgreSQL can take: encodable, no NUL."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False  # a lone surrogate from a JSON escape
    return "\x00" not in text


def _verify(password_hash: str, password: str) -> bool:
    try:
        return _HASHER.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unb64url(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64") from exc
