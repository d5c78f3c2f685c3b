"""Who acts and from where, per HTTP request: an ASGI middleware inside the guard (which has
already replaced a trusted proxy's address with the client's).

The surface is read from the path (``/api/v1`` -> ``api``, or ``ops`` when an operator page
sent it; ``/mcp`` -> ``mcp``; ``/ops`` -> ``ops``; the web chat and sign-in -> ``web``; a
webhook -> its first path segment). On the operator paths the actor is ``admin:token`` with a
bearer token (the access policy checks it before any action runs) and ``admin:local``
without. A state-changing operator request the access policy refuses (401/403) is recorded
as ``admin.access`` with outcome ``denied``."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.audit.context import Who, set_for_request
from gateway.audit.recorder import record
from session_store.db import Database

_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
#: the web chat's page, its API and sign-in
_WEB = ("/login", "/logout", "/web/")


def surface_of(path: str, referer: str | None) -> str:
    if path == "/api/v1" or path.startswith("/api/v1/"):
        if referer and urlsplit(referer).path.startswith("/ops"):
            return "ops"
        return "api"
    if path == "/mcp":
        return "mcp"
    if path == "/ops" or path.startswith("/ops/"):
        return "ops"
    if path in ("/", "/web") or path.startswith(_WEB):
        return "web"
    return path.strip("/").split("/", 1)[0][:32]


def _operator(path: str) -> bool:
    return path == "/mcp" or path == "/api/v1" or path.startswith("/api/v1/")


class AuditOrigin:
    def __init__(self, app: ASGIApp, *, db: Database) -> None:
        self._app = app
        self._db = db

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        client = scope.get("client")
        actor = "anonymous"
        if _operator(path):
            bearer = headers.get("authorization", "").lower().startswith("bearer ")
            actor = "admin:token" if bearer else "admin:local"
        who = Who(
            actor=actor,
            surface=surface_of(path, headers.get("referer")),
            remote_addr=client[0] if client else None,
        )
        set_for_request(who)
        if not _operator(path) or scope["method"] in _SAFE:
            await self._app(scope, receive, send)
            return

        async def watched(message: Message) -> None:
            # recorded before the refusal leaves, so whoever reads the log after the answer
            # finds it there
            if message["type"] == "http.response.start" and message["status"] in (401, 403):
                await record(
                    self._db,
                    "admin.access",
                    ("endpoint", f"{scope['method']} {path}"[:200]),
                    outcome="denied",
                    reason="wrong or missing admin token"
                    if message["status"] == 401
                    else "not allowed here",
                )
            await send(message)

        await self._app(scope, receive, watched)
