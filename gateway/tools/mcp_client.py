"""External MCP servers from the tools file, through the official ``mcp`` client SDK.

One supervisor task per server connects (stdio command or streamable-HTTP URL), lists the
server's tools and registers those the file's ``include``/``exclude`` keep as
``<server>.<tool>`` in the catalog, where each still needs a policy entry to be offered
(fail closed). The supervisor checks the server every few seconds with a tools listing (a
round trip every protocol era answers; ``ping`` is gone from the 2026 one, where a server
answers it "method not found"); when the connection breaks (the server
restarted, the process died) its tools are withdrawn and it reconnects with backoff, so a
server that comes back is discovered again without restarting the gateway.

A call that fails on the connection is not retried (a write might have happened): the model
gets an error result, and the reconnect runs in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx2
import structlog

from gateway.tools.catalog import McpServerConfig, Tool, ToolCaller, ToolSpec
from gateway.tools.runner import ToolFailed

if TYPE_CHECKING:
    from mcp import Client

log = structlog.get_logger(__name__)

PING_SECONDS = 2.0
MAX_BACKOFF = 10.0


def _result_text(result: Any) -> str:
    parts: list[str] = []
    for item in result.content or []:
        text = getattr(item, "text", None)  # TextContent; other kinds are described
        parts.append(text if isinstance(text, str) else f"[{getattr(item, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpServerConnection:
    def __init__(
        self,
        config: McpServerConfig,
        *,
        register: Callable[[str, Sequence[Tool]], None],
    ) -> None:
        self.config = config
        self.source = f"mcp:{config.name}"
        self._register = register
        self._client: Client | None = None
        self._connected = asyncio.Event()
        self._broken = asyncio.Event()
        self.connections = 0
        self.tool_names: list[str] = []
        #: the tools of the newest connection (kept after it closes, for the doctor)
        self.last_tools: list[Tool] = []

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        # the SDK costs about a second of CPU to import: only a process that connects to a
        # server pays it (``gateway doctor`` without one does not)
        from mcp import Client, StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        c = self.config
        if c.url is not None:
            async with (
                # the SDK's own HTTP client type; a read timeout long enough for a server
                # that holds its response stream open (as the SDK's default client does)
                httpx2.AsyncClient(
                    headers=dict(c.headers),
                    timeout=httpx2.Timeout(c.connect_timeout, read=300.0),
                ) as http,
                Client(
                    streamable_http_client(c.url, http_client=http),
                    read_timeout_seconds=c.call_timeout,
                ) as client,
            ):
                yield client
        else:
            params = StdioServerParameters(
                command=c.command[0], args=list(c.command[1:]), env=dict(c.env) or None
            )
            async with Client(stdio_client(params), read_timeout_seconds=c.call_timeout) as client:
                yield client

    async def wait_connected(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout)
        return self._connected.is_set()

    async def run(self) -> None:
        """Connect, register, keep alive; on any failure withdraw and reconnect."""
        backoff = 0.2
        while True:
            try:
                await self._session()
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of a third-party server
                # or its transport means "reconnect"; it must never end the supervisor
                log.warning("mcp_server_disconnected", server=self.config.name, error=repr(exc))
            finally:
                self._client = None
                self._connected.clear()
                self._register(self.source, [])
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _session(self) -> None:
        async with self._open() as client:
            listed = await asyncio.wait_for(client.list_tools(), self.config.connect_timeout)
            tools = [self._tool(t) for t in listed.tools if self.config.wants(t.name)]
            self.tool_names = [t.spec.name for t in tools]
            self.last_tools = tools
            self._client = client
            self._broken.clear()
            self._register(self.source, tools)
            self.connections += 1
            self._connected.set()
            log.info(
                "mcp_server_connected",
                server=self.config.name,
                tools=self.tool_names,
                connection=self.connections,
            )
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._broken.wait(), PING_SECONDS)
                if self._broken.is_set():
                    raise ConnectionError("a call found the connection broken")
                await asyncio.wait_for(
                    client.list_tools(cache_mode="bypass"), self.config.connect_timeout
                )

    def _tool(self, remote: Any) -> Tool:
        name = f"{self.config.name}.{remote.name}"
        remote_name = str(remote.name)

        async def handler(args: Mapping[str, Any], caller: ToolCaller) -> str:
            client = self._client
            if client is None:
                raise ToolFailed(f"the MCP server {self.config.name} is not connected")
            try:
                result = await client.call_tool(
                    remote_name, dict(args), read_timeout_seconds=self.config.call_timeout
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # reconnect in the background, and tell the model instead of failing the turn
                self._broken.set()
                raise ToolFailed(
                    f"the MCP server {self.config.name} failed ({type(exc).__name__})"
                ) from exc
            text = _result_text(result)
            if result.is_error:
                raise ToolFailed(text or "the tool reported an error")
            return text

        schema = remote.input_schema if isinstance(remote.input_schema, dict) else {}
        return Tool(
            spec=ToolSpec(
                name=name,
                description=(remote.description or remote_name)[:1024],
                parameters=schema,
                source=self.source,
            ),
            handler=handler,
        )
