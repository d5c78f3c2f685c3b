"""The gateway's HTTP server (ASGI): health, readiness, metrics, the web chat, webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import uvicorn
from fastapi import FastAPI
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.audit.origin import AuditOrigin
from gateway.core.errors import ConfigError, StoreError
from gateway.http.guard import SecurityMiddleware
from gateway.http.linger import LingeringHttpProtocol

if TYPE_CHECKING:
    from gateway.core.lifecycle.supervisor import Supervisor
    from gateway.core.metrics import Metrics
    from gateway.core.settings import Settings
    from gateway.http.admin import OperatorSurface
    from gateway.http.guard import HttpPolicy
    from session_store.store import Store


class Served(Protocol):
    """What the HTTP app reads of the gateway it serves (``gateway.runtime.gateway.Gateway``):
    the app is built by the runtime, never the other way round."""

    ready: bool
    settings: Settings
    store: Store
    metrics: Metrics
    supervisor: Supervisor
    operator: OperatorSurface
    http_policy: HttpPolicy

    async def refresh_gauges(self) -> None: ...


def build_app(gateway: Served, extra_routes: Sequence[BaseRoute]) -> FastAPI:
    app = FastAPI(title="chat gateway", version="0.1.0", docs_url=None, redoc_url=None)

    # bodies are generic (no error text); the reasons are in the logs and in
    # gateway_worker_up / gateway_worker_restarts_total
    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> Response:
        # wedged: a supervised loop made no progress for several of its intervals; an
        # orchestrator restarts the process
        if gateway.supervisor.wedged():
            return JSONResponse({"status": "wedged"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        if not gateway.ready:
            return JSONResponse({"status": "starting"}, status_code=503)
        if gateway.supervisor.down():
            return JSONResponse({"status": "degraded"}, status_code=503)
        try:
            await asyncio.wait_for(gateway.store.ping(), 2.0)
        except (StoreError, TimeoutError):
            return JSONResponse({"status": "database unavailable"}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if gateway.settings.gateway_metrics_auth:  # security: GATEWAY_METRICS_AUTH
            gateway.operator.policy.check(
                client=request.client.host if request.client else None,
                host=request.headers.get("host"),
                authorization=request.headers.get("authorization"),
            )
        await gateway.refresh_gauges()
        # a scraper that asks for OpenMetrics (Prometheus with exemplar storage) gets the
        # format that carries exemplars: latency buckets linked to traces
        if "application/openmetrics-text" in request.headers.get("accept", ""):
            return Response(
                gateway.metrics.render(openmetrics=True),
                media_type="application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
        return PlainTextResponse(
            gateway.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    # admin API (/api/v1), MCP (/mcp) and operator pages (/ops), before the adapters' routes
    gateway.operator.mount(app)
    for route in extra_routes:
        app.router.routes.append(route)
    # webhook POSTs straight to their route, inside the security middleware
    app.add_middleware(DirectPosts, router=app.router, handlers=_exception_handlers(app))
    # the audit log: who acts and from where, per request (inside the guard, which has put
    # the client's own address in place of a trusted proxy's)
    app.add_middleware(AuditOrigin, db=gateway.store.db)
    # security: Host allow-list, same-origin, body limits, stream caps, page headers
    app.add_middleware(SecurityMiddleware, policy=gateway.http_policy)
    return app


def _exception_handlers(app: FastAPI) -> dict[Any, Any]:
    """What FastAPI gives its ``ExceptionMiddleware`` (500 and ``Exception`` stay with the
    outer ``ServerErrorMiddleware``, which the direct path keeps)."""
    return {k: v for k, v in app.exception_handlers.items() if k not in (500, Exception)}


class DirectPosts:
    """POSTs to a fixed path (the platforms' webhooks, ``/sink/inbound``) handed to their
    route at once: no walk over every route, no exit stack. Only where the router
    would pick that same plain ``Route`` (first full match), with the same exception handlers
    (an ``ExceptionMiddleware`` built like FastAPI's); everything else, and every request
    under a ``root_path``, goes through FastAPI as before. It sits inside
    ``SecurityMiddleware``: every check and header still applies."""

    def __init__(self, app: ASGIApp, *, router: Router, handlers: dict[Any, Any]) -> None:
        self._app = app
        self._router = router
        self._dispatch = ExceptionMiddleware(self._handle, handlers=handlers)
        #: path -> route, decided on the first request (routes are all added by then)
        self._table: dict[str, Route] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            table = self.table()
            route = table.get(scope["path"])
            if route is not None:
                scope["router"] = self._router
                scope["route"] = route
                scope["endpoint"] = route.endpoint
                scope["path_params"] = {}
                await self._dispatch(scope, receive, send)
                return
        await self._app(scope, receive, send)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await scope["route"].handle(scope, receive, send)

    def table(self) -> dict[str, Route]:
        """Path -> route of the POSTs taken directly (built once)."""
        if self._table is not None:
            return self._table
        table: dict[str, Route] = {}
        for route in self._router.routes:
            if (
                type(route) is not Route
                or route.param_convertors
                or not route.methods
                or "POST" not in route.methods
            ):
                continue
            probe: Scope = {"type": "http", "path": route.path, "method": "POST", "root_path": ""}
            first = next(
                (r for r in self._router.routes if r.matches(probe)[0] is Match.FULL), None
            )
            if first is route:
                table[route.path] = route
        self._table = table
        return table


class _Server(uvicorn.Server):
    """uvicorn inside our own event loop: the gateway owns signals and shutdown order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind_error(exc: OSError, host: str, port: int) -> ConfigError:
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            "GATEWAY_HTTP_PORT",
            f"port {port} on {host} is already in use (another gateway or program listens "
            "there): stop it, or set GATEWAY_HTTP_PORT to a free port",
        )
    if exc.errno == errno.EACCES:
        return ConfigError(
            "GATEWAY_HTTP_PORT",
            f"not allowed to listen on port {port}: ports below 1024 need privileges; "
            "use a port of 1024 or above",
        )
    return ConfigError(
        "GATEWAY_HTTP_HOST",
        f"cannot listen on {host}:{port} ({exc.strerror or exc}): set GATEWAY_HTTP_HOST to an "
        "address of this machine (127.0.0.1, or 0.0.0.0 for every interface)",
    )


def probe_listen(host: str, port: int) -> ConfigError | None:
    """Bind and release ``host:port`` as ``HttpServer`` would (``gateway doctor``): the error
    naming the setting, or None when it is free."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1)
    except OSError as exc:
        return _bind_error(exc, host, port)
    finally:
        sock.close()
    return None


class HttpServer:
    def __init__(self, app: Any, host: str, port: int, *, limit_concurrency: int = 1000) -> None:
        # proto=IPPROTO_TCP is what makes asyncio disable Nagle on accepted connections
        # (it checks sock.proto); with proto 0 every keep-alive response waited ~40 ms for
        # the client's delayed ACK between its header and body writes
        self._sock = socket.socket(
            socket.AF_INET6 if ":" in host else socket.AF_INET,
            socket.SOCK_STREAM,
            socket.IPPROTO_TCP,
        )
        self._host = host
        self._port = port
        config = uvicorn.Config(
            app,
            log_config=None,
            lifespan="off",
            access_log=False,
            timeout_graceful_shutdown=5,
            # an answer given before the body was read (413) reaches the client even when the
            # connection closes after it (gateway.http.linger)
            http=LingeringHttpProtocol,
            # connections + tasks served at once; uvicorn answers 503 beyond
            limit_concurrency=limit_concurrency,
            # X-Forwarded-* are read by gateway.http.guard, only from proxies we trust, and it
            # keeps the connecting address for proxy sign-in
            proxy_headers=False,
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # --- start-up errors name the setting: exit 2, not a bare [Errno 98] ---
        try:
            self._sock.bind((self._host, self._port))
            self._sock.listen(512)
        except OSError as exc:
            self._sock.close()
            raise _bind_error(exc, self._host, self._port) from exc
        self._sock.setblocking(False)
        self._task = asyncio.create_task(self._server.serve([self._sock]), name="http-server")
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._sock.close()
