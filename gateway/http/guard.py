"""The HTTP server's guard, one ASGI middleware in front of every route.

In order, for every request:

1. **Host allow-list** (DNS rebinding): a Host that is not ours gets 403, naming the Host and
   the setting that admits it (a reverse proxy on the same host passes the public name on).
   Loopback names are always ours; on a loopback bind they are the only ones unless
   ``GATEWAY_ALLOWED_HOSTS`` adds more; on another bind any Host is accepted unless that
   setting lists them. X-Forwarded-Host is never believed: a rebound page could send it.
2. **Malformed request lines**: NUL in the path or query, a non-numeric Content-Length: 400.
3. **Same origin** for every state-changing request (anything but GET/HEAD/OPTIONS): a
   browser's ``Sec-Fetch-Site: cross-site|same-site`` or an ``Origin`` other than the server's
   own gets 403; the body must be ``application/json`` (415), which a cross-site form or a
   ``text/plain`` fetch cannot send without a CORS preflight we never answer. Platform
   webhooks (the prefixes each surface plugin declares) are exempt from the content type rule:
   they are verified by their own signatures, and some platforms post forms.
4. **Body size**: a declared ``Content-Length`` over the limit gets 413 before anything is
   read; a chunked body is counted while the route reads it and cut off at the limit (413).
   The default is ``GATEWAY_MAX_BODY_BYTES``; a route that needs more declares it with
   ``HttpPolicy.allow_larger(prefix, limit)``. The 413 reaches the client even when the
   connection closes after it: the server lingers over the rest of the body
   (``gateway.http.linger``).
5. **Live streams** (``Accept: text/event-stream`` GETs) are capped per client address: 429.
6. **Headers**: every response gets ``nosniff`` and ``Referrer-Policy``; HTML pages get a CSP
   with ``frame-ancestors 'none'`` (a page may send its own, built by ``page_headers``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.core.access_settings import is_loopback_bind
from gateway.core.settings import Settings

log = structlog.get_logger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)
_HTML_ONLY = ((b"x-frame-options", b"DENY"),)
#: a DNS name (or an IP address) as a refusal may quote it back
_HOST_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.:-]{0,252})")
#: distinct refused Host names warned about (then silent: a scanner sprays names)
MAX_WARNED_HOSTS = 100


def page_headers(*, scripts: Iterable[str] = (), styles: Iterable[str] = ()) -> dict[str, str]:
    """Headers for an HTML page with inline ``<script>``/``<style>`` blocks: a CSP that allows
    exactly those blocks (by hash) and nothing else inline."""

    def hashes(blocks: Iterable[str]) -> str:
        return "".join(
            f" 'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'"
            for b in blocks
        )

    csp = (
        f"default-src 'self'; script-src 'self'{hashes(scripts)}; "
        f"style-src 'self'{hashes(styles)}; img-src 'self' data: blob:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )
    return {"Content-Security-Policy": csp, "Cache-Control": "no-store"}


@functools.lru_cache(maxsize=1024)  # per request, twice (Host and peer): parsed once each
def _is_loopback_name(name: str) -> bool:
    return is_loopback_bind(name)


def host_name(host_header: str) -> str:
    """The name in a Host header, lower-case, without the port (``[::1]:8080`` -> ``::1``)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


@dataclass(slots=True, kw_only=True)
class HttpPolicy:
    #: names accepted in Host besides loopback ones; None: any Host
    allowed_hosts: frozenset[str] | None
    max_body_bytes: int = 1_048_576
    sse_per_client: int = 16
    #: paths whose POSTs come from platforms (signed), not browsers: any content type (the
    #: composition root sets the prefixes its surface plugins declare)
    webhook_prefixes: tuple[str, ...] = ()
    #: larger limits declared by routes: (path prefix, bytes)
    body_limits: list[tuple[str, int]] = field(default_factory=list)
    #: upload routes (a full-path pattern, bytes): their body is a file, sent as
    #: ``application/octet-stream``, which a page of another site cannot send without a CORS
    #: preflight this server never grants; nothing else is accepted there
    uploads: list[tuple[re.Pattern[str], int]] = field(default_factory=list)
    #: proxies whose X-Forwarded-For/-Proto are believed (loopback ones always are)
    trusted_proxies: tuple[Any, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpPolicy:
        hosts = {h.strip().lower() for h in settings.gateway_allowed_hosts if h.strip()}
        allowed: frozenset[str] | None
        if "*" in hosts:
            allowed = None
        elif hosts:
            allowed = frozenset(host_name(h) if not h.startswith("*.") else h for h in hosts)
        elif is_loopback_bind(settings.gateway_http_host):
            allowed = frozenset()
        else:
            allowed = None
        return cls(
            allowed_hosts=allowed,
            max_body_bytes=settings.gateway_max_body_bytes,
            sse_per_client=settings.gateway_sse_per_client,
            trusted_proxies=tuple(
                ipaddress.ip_network(c, strict=False) for c in settings.gateway_trusted_proxies
            ),
        )

    def allow_larger(self, prefix: str, limit: int) -> None:
        """Let requests under ``prefix`` carry up to ``limit`` bytes (uploads)."""
        self.body_limits.append((prefix, limit))

    def allow_upload(self, pattern: re.Pattern[str], limit: int) -> None:
        """Let requests whose whole path matches ``pattern`` carry a file of up to ``limit``
        bytes as ``application/octet-stream``."""
        self.uploads.append((pattern, limit))

    def upload_limit(self, path: str) -> int | None:
        limits = [n for pattern, n in self.uploads if pattern.fullmatch(path)]
        return max(limits) if limits else None

    def body_limit(self, path: str) -> int:
        limits = [n for prefix, n in self.body_limits if path.startswith(prefix)]
        upload = self.upload_limit(path)
        return max([self.max_body_bytes, *limits, *([upload] if upload else [])])

    def host_allowed(self, host_header: str | None) -> bool:
        if self.allowed_hosts is None:
            return True
        name = host_name(host_header or "")
        if not name:
            return False
        if _is_loopback_name(name) or name in self.allowed_hosts:
            return True
        return any(
            pattern.startswith("*.") and name.endswith(pattern[1:])
            for pattern in self.allowed_hosts
        )

    def origin_ours(self, origin: str, host_header: str | None) -> bool:
        if origin == "null":
            return False
        try:
            parts = urlsplit(origin)
            netloc = parts.netloc.lower()
        except ValueError:
            return False
        if not netloc or parts.scheme not in ("http", "https"):
            return False
        if host_header is not None and netloc == host_header.strip().lower():
            return True
        # a name the operator listed is ours too (a proxy that rewrites Host)
        name = host_name(netloc)
        return self.allowed_hosts is not None and name in self.allowed_hosts


class _TooLarge(HTTPException):
    """Raised from ``receive`` when a body passes its limit: the app's own handlers (and
    FastAPI's body parsing, which re-raises HTTP exceptions) answer it as a 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body is over {limit} bytes")


def _problem(status: int, title: str, detail: str) -> tuple[Message, Message]:
    body = json.dumps(
        {
            "type": f"urn:chat-gateway:problem:{title.lower().replace(' ', '-')}",
            "title": title,
            "status": status,
            "detail": detail,
        }
    ).encode()
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/problem+json"),
            (b"content-length", str(len(body)).encode()),
            *_ALWAYS,
        ],
    }
    return start, {"type": "http.response.body", "body": body}


class SecurityMiddleware:
    def __init__(self, app: ASGIApp, policy: HttpPolicy) -> None:
        self._app = app
        self._policy = policy
        #: open live streams per client address (entries dropped at zero)
        self._streams: dict[str, int] = {}
        #: refused Host names already warned about
        self._warned_hosts: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self._app(scope, receive, send)
            return
        headers = _headers(scope)
        scope = self._forwarded(scope, headers)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, title, detail = refusal
            log.info(
                "http_request_refused",
                status=status,
                reason=title,
                method=scope.get("method"),
                path=scope.get("path"),
                client=(scope.get("client") or (None,))[0],
            )
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            for message in _problem(status, title, detail):
                await send(message)
            return
        if scope["type"] == "websocket":
            await self._app(scope, receive, send)
            return
        stream_client = None
        if scope["method"] == "GET" and "text/event-stream" in headers.get("accept", ""):
            client = scope.get("client")
            stream_client = client[0] if client else "-"
            if self._streams.get(stream_client, 0) >= self._policy.sse_per_client:
                for message in _problem(
                    429, "Too many streams", "this client holds too many live streams open"
                ):
                    await send(message)
                return
            self._streams[stream_client] = self._streams.get(stream_client, 0) + 1
        try:
            await self._guarded(scope, receive, send)
        finally:
            if stream_client is not None:
                left = self._streams.get(stream_client, 1) - 1
                if left <= 0:
                    self._streams.pop(stream_client, None)
                else:
                    self._streams[stream_client] = left

    def _host_refused(self, host: str | None) -> str:
        """What to do about a refused Host, in words: behind a reverse proxy on this host, the
        public name arrives in Host and must be listed. Warned once per name (bounded, so a
        scanner's spray of names cannot flood the log); a name that is not a host name (an
        attack, not a proxy) is not echoed back."""
        name = host_name(host or "")
        if not _HOST_NAME.fullmatch(name):
            return "this server does not answer to that name; list it in GATEWAY_ALLOWED_HOSTS"
        fix = f"GATEWAY_ALLOWED_HOSTS={name}"
        if name not in self._warned_hosts and len(self._warned_hosts) < MAX_WARNED_HOSTS:
            self._warned_hosts.add(name)
            log.warning("http_host_not_allowed", host=name, fix=fix)
        return (
            f"this server does not answer to the name {name}; if that is its address (a "
            f"reverse proxy passes it on), set {fix} (a comma-separated list) and restart"
        )

    def _forwarded(self, scope: Scope, headers: Mapping[str, str]) -> Scope:
        """Behind a proxy we trust (loopback, or GATEWAY_TRUSTED_PROXIES): the client is the
        last address in X-Forwarded-For that is not one of our proxies, and the scheme is
        X-Forwarded-Proto. The connecting address stays in ``scope["state"]["peer"]``."""
        client = scope.get("client")
        peer = client[0] if client else None
        state = dict(scope.get("state") or {})
        state[PEER] = peer
        scope = {**scope, "state": state}
        if not (_is_loopback_name(peer or "") or client_in(peer, self._policy.trusted_proxies)):
            return scope
        forwarded = headers.get("x-forwarded-for")
        if forwarded:
            hops = [h.strip() for h in forwarded.split(",") if h.strip()]
            while hops and (
                _is_loopback_name(hops[-1]) or client_in(hops[-1], self._policy.trusted_proxies)
            ):
                hops.pop()
            if hops and _valid_ip(hops[-1]):
                scope["client"] = (hops[-1], 0)
        proto = headers.get("x-forwarded-proto", "").strip().lower()
        if proto in ("http", "https") and scope["type"] == "http":
            scope["scheme"] = proto
        return scope

    def _refusal(self, scope: Scope, headers: Mapping[str, str]) -> tuple[int, str, str] | None:
        policy = self._policy
        host = headers.get("host")
        if not policy.host_allowed(host):
            return 403, "Host not allowed", self._host_refused(host)
        raw_path = scope.get("raw_path") or scope.get("path", "").encode()
        query = scope.get("query_string", b"")
        if b"\x00" in raw_path or b"%00" in raw_path.lower() or b"%00" in query.lower():
            return 400, "Bad request", "NUL is not allowed in a path or query"
        if "\x00" in scope.get("path", ""):
            return 400, "Bad request", "NUL is not allowed in a path"
        if scope["type"] == "websocket":
            origin = headers.get("origin")
            if origin is not None and not policy.origin_ours(origin, host):
                return 403, "Cross-site request", "a websocket from another origin"
            return None
        length = headers.get("content-length")
        if length is not None:
            if not (length.strip().isascii() and length.strip().isdigit()):
                return 400, "Bad request", "Content-Length is not a number"
            limit = policy.body_limit(scope["path"])
            if int(length) > limit:
                return 413, "Request too large", f"the body is over {limit} bytes"
        method = scope["method"]
        if method in SAFE_METHODS:
            return None
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return 403, "Cross-site request", "state-changing requests must come from this site"
        origin = headers.get("origin")
        if origin is not None and not policy.origin_ours(origin, host):
            return 403, "Cross-site request", "state-changing requests must come from this site"
        if scope["path"].startswith(policy.webhook_prefixes):
            return None
        ctype = headers.get("content-type")
        has_body = (length is not None and length.strip() != "0") or (
            "transfer-encoding" in headers
        )
        if ctype is None:
            if has_body:
                return 415, "Unsupported media type", "send the body as application/json"
            return None
        media = ctype.split(";", 1)[0].strip().lower()
        if policy.upload_limit(scope["path"]) is not None:
            if media != "application/octet-stream":
                return 415, "Unsupported media type", "send the file as application/octet-stream"
            return None
        if media != "application/json":
            return 415, "Unsupported media type", "send the body as application/json"
        return None

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self._policy.body_limit(scope["path"])
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(limit)
            return message

        async def secured_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = _with_headers(message)
            await send(message)

        try:
            await self._app(scope, counted_receive, secured_send)
        except _TooLarge:
            log.info("http_body_too_large", path=scope["path"], limit=limit)
            if started:
                return  # the route answered before reading it all; nothing more to say
            for message in _problem(413, "Request too large", f"the body is over {limit} bytes"):
                await send(message)


PEER = "peer"


def _valid_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        name = key.decode("latin-1").lower()
        # a repeated header keeps its first value (Host, Origin and friends appear once)
        out.setdefault(name, value.decode("latin-1"))
    return out


def _with_headers(message: Message) -> Message:
    headers: list[tuple[bytes, bytes]] = list(message.get("headers", ()))
    present = {k.lower() for k, _ in headers}
    ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
    extra = [h for h in _ALWAYS if h[0] not in present]
    if ctype.lower().startswith(b"text/html"):
        extra.extend(h for h in _HTML_ONLY if h[0] not in present)
        if b"content-security-policy" not in present:
            extra.append((b"content-security-policy", DEFAULT_CSP.encode()))
    if not extra:
        return message
    return {**message, "headers": headers + extra}


def client_ip(client: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``client`` (brackets allowed), an IPv4-mapped IPv6 address as its IPv4
    one; ``None`` when it is not an address."""
    if not client:
        return None
    try:
        ip = ipaddress.ip_address(client.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def client_in(client: str | None, networks: Iterable[Any]) -> bool:
    """Whether the address ``client`` is inside one of ``networks`` (ip_network values)."""
    ip = client_ip(client)
    return ip is not None and any(ip.version == net.version and ip in net for net in networks)


# --- stored raw payloads ----------------------------------------------------------------------
