"""Who is using the web chat (``GATEWAY_WEB_AUTH``).

* ``none``: one local user, ``local``. Settings allow it only on a loopback bind.
* ``accounts``: people in the ``web_accounts`` table (``gateway users add``), passwords hashed
  with argon2id. ``POST /login`` checks a password (attempts rate limited per client address
  and per name) and sets a signed session cookie: ``HttpOnly``, ``SameSite=Lax``, ``Secure``
  when the request came over https. ``POST /logout`` clears it and revokes every cookie the
  person was given until then.
* ``proxy``: the name in ``GATEWAY_WEB_AUTH_HEADER``, believed only when the connection comes
  from an address in ``GATEWAY_TRUSTED_PROXIES`` (oauth2-proxy, Authelia, Cloudflare Access).

The web chat adapter asks ``person(request)`` on every call and never takes a name from the
browser: a message's sender and a vote's voter are the signed-in person.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
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
from session_store.accounts import AccountStore
from session_store.db import Database
from session_store.store import Store

log = structlog.get_logger(__name__)

AuthMode = Literal["none", "accounts", "proxy"]
COOKIE = "gw_session"
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
    ) -> None:
        self.mode: AuthMode = mode
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
        return cls(
            settings.gateway_web_auth,
            accounts=None if store is None else AccountStore(store.db),
            audit_db=None if store is None else store.db,
            header=settings.gateway_web_auth_header,
            trusted=tuple(
                ipaddress.ip_network(c, strict=False) for c in settings.gateway_trusted_proxies
            ),
        )

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
        if not cookie or len(cookie) > 1024 or self._accounts is None:
            return None
        payload_b64, _, mac_b64 = cookie.partition(".")
        try:
            payload = _unb64(payload_b64)
            mac = _unb64(mac_b64)
        except ValueError:
            return None
        if not hmac.compare_digest(mac, self._mac(await self._signing_key(), payload)):
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
        mac = self._mac(await self._signing_key(), payload)
        return f"{_b64(payload)}.{_b64(mac)}"

    # --- sign-in and sign-out (accounts) ---------------------------------------------------

    def routes(self) -> list[Route]:
        # /logout opened by hand (a typed address, an old bookmark) lands on the chat, which
        # sends a signed-out person on to the sign-in page: never a bare 404
        back = Route("/logout", _back_to_chat, methods=["GET"])
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
        response.set_cookie(
            COOKIE,
            await self._cookie_for(account.name),
            max_age=SESSION_SECONDS,
            path="/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
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
        response = JSONResponse({"status": "signed out"})
        response.delete_cookie(
            COOKIE, path="/", httponly=True, samesite="lax", secure=request.url.scheme == "https"
        )
        return response

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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError("not base64") from exc
