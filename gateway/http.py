"""The gateway's HTTP server (ASGI): health, readiness, metrics, the web chat, webhooks."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute

from gateway.errors import StoreError

if TYPE_CHECKING:
    from gateway.runtime import Gateway


def build_app(gateway: Gateway, extra_routes: Sequence[BaseRoute]) -> FastAPI:
    app = FastAPI(title="chat gateway", version="0.1.0", docs_url=None, redoc_url=None)

    # issue 12: bodies are generic (no error text); the reasons are in the logs and in
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
        await gateway.refresh_gauges()
        return PlainTextResponse(
            gateway.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    # admin API (/api/v1), MCP (/mcp) and operator pages (/ops), before the adapters' routes
    gateway.operator.mount(app)
    for route in extra_routes:
        app.router.routes.append(route)
    return app


class _Server(uvicorn.Server):
    """uvicorn inside our own event loop: the gateway owns signals and shutdown order."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class HttpServer:
    def __init__(self, app: Any, host: str, port: int) -> None:
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
            app, log_config=None, lifespan="off", access_log=False, timeout_graceful_shutdown=5
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    async def start(self) -> None:
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((self._host, self._port))
        self._sock.listen(512)
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
