"""Access and errors of the operator surface: who may call ``/api/v1`` and ``/mcp``
(``AccessPolicy``: the admin token, else loopback clients addressing a loopback name; with
``GATEWAY_OPS_AUTH=oidc`` a signed-in person with a role enough for the request, or the admin
token), the guard in front of the MCP endpoint, and RFC 9457 problem documents for every
error of those routes."""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any

import structlog
from fastapi import FastAPI
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.audit.context import Who, current, set_for_request
from gateway.core.errors import RequestError, SessionNotFound, StoreError
from gateway.http.guard import client_ip, host_name
from gateway.http.opsauth import COOKIE, LOGIN, OpsSignIn, Principal, allows, required_role

log = structlog.get_logger(__name__)

API_PREFIX = "/api/v1"
MCP_PATH = "/mcp"
PROBLEM_JSON = "application/problem+json"
_LOCAL_NAMES = {"localhost", "localhost."}

# --- problems ---------------------------------------------------------------------------


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    body = {
        "type": f"urn:chat-gateway:problem:{slug}",
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _ours(request: Request) -> bool:
    path = request.url.path
    return path == API_PREFIX or path.startswith(API_PREFIX + "/") or path == MCP_PATH


def install_problem_handlers(app: FastAPI) -> None:
    """Problem documents for the operator paths; every other path keeps its old behaviour
    (re-raising from a handler ends in the server's default 500, as without one)."""

    async def on_request_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return problem(exc.status, exc.title, str(exc), headers=headers)

    async def on_not_found(request: Request, exc: Exception) -> Response:
        if not _ours(request):
            raise exc
        return problem(404, "Session not found", str(exc))

    async def on_store_error(request: Request, exc: Exception) -> Response:
        if not _ours(request):
            # ingress (web chat, webhooks) while the database is unreachable: 503
            # so the sender retries; generic body, the error is in the log
            log.warning("store_unavailable", path=request.url.path, error=str(exc))
            return JSONResponse(
                {"error": "temporarily unavailable"}, status_code=503, headers={"Retry-After": "1"}
            )
        log.warning("admin_store_error", path=request.url.path, error=str(exc))
        return problem(503, "Database unavailable", str(exc), headers={"Retry-After": "5"})

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        if not _ours(request):
            return await request_validation_exception_handler(request, exc)
        errors = [
            {
                "field": ".".join(str(p) for p in e.get("loc", ())),
                "message": str(e.get("msg", "invalid")),
            }
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        return problem(422, "Invalid request", detail, errors=errors)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if not _ours(request):
            return await http_exception_handler(request, exc)
        detail = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404:
            detail = f"no such endpoint: {request.method} {request.url.path}"
        title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "Error")
        headers = exc.headers
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request))}
        return problem(exc.status_code, title, detail, headers=headers)

    app.add_exception_handler(RequestError, on_request_error)
    app.add_exception_handler(SessionNotFound, on_not_found)
    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette's 405 names only the first
    route's, where a path's methods are spread over routes of several routers)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, BaseRoute) and route.matches(request.scope)[0] != Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


# --- access -----------------------------------------------------------------------------


def _is_loopback_ip(host: str | None) -> bool:
    ip = client_ip(host)
    return ip is not None and ip.is_loopback


class AccessPolicy:
    """Who may use the admin API and /mcp (see the module docstring)."""

    def __init__(self, token: str | None, *, signed_in: OpsSignIn | None = None) -> None:
        self._token = token.encode() if token else None
        #: the operator sign-in (GATEWAY_OPS_AUTH=oidc), or None (the token alone)
        self.signed_in = signed_in

    def check(self, *, client: str | None, host: str | None, authorization: str | None) -> None:
        """Raise ``RequestError`` (401/403) unless the caller may go on (the token, or
        loopback without one: for what needs no person, such as ``/metrics``)."""
        try:
            self._check(client=client, host=host, authorization=authorization)
        except RequestError as exc:
            # who knocked, never what they sent as a token
            log.info("operator_access_refused", status=exc.status, client=client, host=host)
            raise

    async def admit(
        self,
        *,
        method: str,
        path: str,
        client: str | None,
        host: str | None,
        authorization: str | None,
        cookie: str | None,
    ) -> Principal:
        """Who makes this request, if they may make it; else ``RequestError`` (401: who is
        unknown, 403: not allowed). The audit log names the principal from here on."""
        try:
            principal = await self._principal(
                client=client, host=host, authorization=authorization, cookie=cookie
            )
            # known from here on: a refusal below is recorded as theirs too
            now = current()
            set_for_request(Who(principal.actor, now.surface, now.remote_addr))
            needed = required_role(method, path)
            if not allows(principal.role, needed):
                raise RequestError(
                    f"{principal.actor} has "
                    + (f"the role {principal.role}" if principal.role else "no operator role")
                    + f"; {method} {path} needs the role {needed}",
                    status=403,
                    title="Forbidden",
                )
        except RequestError as exc:
            log.info("operator_access_refused", status=exc.status, client=client, host=host)
            raise
        return principal

    async def _principal(
        self,
        *,
        client: str | None,
        host: str | None,
        authorization: str | None,
        cookie: str | None,
    ) -> Principal:
        if self.signed_in is None:
            self._check(client=client, host=host, authorization=authorization)
            return Principal("admin:token" if self._token else "admin:local", "admin")
        if authorization:
            # scripts: the admin token, a role of its own
            if self._token is None:
                raise RequestError(
                    f"GATEWAY_ADMIN_TOKEN is not set: sign in at {LOGIN}",
                    status=401,
                    title="Unauthorized",
                )
            self._check(client=client, host=host, authorization=authorization)
            return Principal("admin:token", "admin")
        person = await self.signed_in.principal(cookie)
        if person is None:
            raise RequestError(
                f"sign in at {LOGIN}, or send Authorization: Bearer <GATEWAY_ADMIN_TOKEN>",
                status=401,
                title="Unauthorized",
            )
        return person

    def _check(self, *, client: str | None, host: str | None, authorization: str | None) -> None:
        if self._token is not None:
            scheme, _, value = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                value.strip().encode(), self._token
            ):
                raise RequestError(
                    "send Authorization: Bearer <GATEWAY_ADMIN_TOKEN>",
                    status=401,
                    title="Unauthorized",
                )
            return
        if not _is_loopback_ip(client):
            raise RequestError(
                "GATEWAY_ADMIN_TOKEN is not set, so this endpoint answers only clients on "
                "this machine (loopback); set a token to use it remotely",
                status=403,
                title="Forbidden",
            )
        name = host_name(host or "")
        if name not in _LOCAL_NAMES and not _is_loopback_ip(name):
            # a page whose DNS name was rebound to 127.0.0.1 reaches us from loopback, but
            # with its own name in Host
            raise RequestError(
                "without GATEWAY_ADMIN_TOKEN this endpoint must be addressed as localhost or "
                "a loopback address",
                status=403,
                title="Forbidden",
            )

    async def admit_request(self, request: Request) -> Principal:
        return await self.admit(
            method=request.method,
            path=request.url.path,
            client=request.client.host if request.client else None,
            host=request.headers.get("host"),
            authorization=request.headers.get("authorization"),
            cookie=request.cookies.get(COOKIE),
        )


class GuardedASGI:
    """An ASGI app behind the access policy, answering refusals as problem documents."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self._app = app
        self._policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                await self._policy.admit_request(Request(scope))
            except RequestError as exc:
                extra = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                response = problem(exc.status, exc.title, str(exc), headers=extra)
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)
