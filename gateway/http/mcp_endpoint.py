"""``/mcp`` on the gateway's HTTP server (streamable HTTP), made on its first request.

Importing the MCP SDK was about a third of a ``gateway run``'s start-up imports (0.3 s of CPU
of its 1.2 s), and putting the tools on a server (their schemas) a third of what building the
HTTP app costs; a gateway no agent talks to over ``/mcp`` now pays neither, and the first
request pays both once. ``gateway mcp`` (stdio) builds its server at once, as before."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.http.access import MCP_PATH

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer


class McpEndpoint:
    """The ASGI app at ``/mcp``. The first request builds the MCP server, has ``register`` put
    the tools on it and starts its session manager; every request is then the manager's.
    ``stop`` ends open streams (before the HTTP server drains); a request after it is a 503."""

    def __init__(self, register: Callable[[MCPServer], None]) -> None:
        self._register = register
        self._app: ASGIApp | None = None
        self._made = asyncio.Lock()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = await self._started()
        if app is None:
            stopping = PlainTextResponse("the gateway is stopping", status_code=503)
            await stopping(scope, receive, send)
            return
        await app(scope, receive, send)

    async def _started(self) -> ASGIApp | None:
        async with self._made:
            if self._stop.is_set():
                return None
            if self._app is None:
                self._app = await self._start()
            return self._app

    async def _start(self) -> ASGIApp:
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
        from mcp.server.transport_security import TransportSecuritySettings

        from gateway.http.mcp import new_mcp_server

        server = new_mcp_server()
        self._register(server)
        # builds the session manager; the Starlette app it returns is not used: the endpoint
        # is mounted on our app behind our access policy, which also covers DNS rebinding.
        # Stateless: the tools keep no per-connection state (everything is in PostgreSQL), so
        # any replica behind a load balancer can answer any request of a client.
        server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = server.session_manager
        started = asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                started.set()
                await self._stop.wait()

        # a context of its own: not the first request's (its log and audit bindings)
        self._task = asyncio.create_task(
            serve(), name="mcp-sessions", context=contextvars.Context()
        )
        waiter = asyncio.create_task(started.wait(), name="mcp-sessions-started")
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
        if self._task.done():
            self._task.result()  # it failed to start: raise why
        return StreamableHTTPASGIApp(manager)

    async def stop(self) -> None:
        """Ends open MCP streams; later requests are refused."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, 5.0)
