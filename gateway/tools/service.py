"""The tools of a running gateway: the catalog (built-ins + MCP servers, under the file's
policy) and, per turn, the routed bundle and its toolbox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from gateway.core.config_file import load_config_file
from gateway.core.metrics import Metrics
from gateway.core.settings import Settings
from gateway.knowledge.retrieval import KnowledgeSearch
from gateway.tools.approvals import ApprovalService
from gateway.tools.asking import FamilyAsker
from gateway.tools.builtin import BUILTIN_SPECS, DEFAULT_POLICIES, builtin_tools
from gateway.tools.catalog import (
    Tool,
    ToolCaller,
    ToolPolicyCatalog,
    ToolsFile,
    load_tools_file,
    tools_file_for,
)
from gateway.tools.mcp_client import McpServerConnection
from gateway.tools.routing import (
    Bundle,
    RoutingDecision,
    allowed_policies,
    families_of,
    select_bundle,
)
from gateway.tools.runner import Approvals, ToolFailed, TurnToolbox
from session_store.store import Store

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    bundle: Bundle
    toolbox: TurnToolbox | None


class ToolService:
    def __init__(
        self,
        store: Store,
        *,
        tools_file: ToolsFile,
        metrics: Metrics,
        extra: Sequence[Tool] = (),
        knowledge: KnowledgeSearch | None = None,
    ) -> None:
        self.file = tools_file
        self.metrics = metrics
        self.catalog = ToolPolicyCatalog(
            [*builtin_tools(store, knowledge=knowledge), *extra],
            defaults=DEFAULT_POLICIES,
            tools_file=tools_file,
        )
        self.approvals: Approvals | None = None
        #: the routing side query (``gateway.tools.asking``); None: keywords alone
        self.asker: FamilyAsker | None = None
        self.servers = [McpServerConnection(c, register=self._register) for c in tools_file.servers]
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    def _register(self, source: str, tools: Sequence[Tool]) -> None:
        """Replace the tools of one MCP server (none while it is disconnected)."""
        self.catalog.remove_source(source)
        for tool in tools:
            self.catalog.add(tool, defaults={})

    async def start(self) -> None:
        """Connect the MCP servers (each waited for up to its connect timeout: a server
        that is down at start is discovered when it comes up), then log the catalog."""
        for server in self.servers:
            self._tasks.append(
                asyncio.create_task(server.run(), name=f"mcp-server-{server.config.name}")
            )
        await asyncio.gather(*(s.wait_connected(s.config.connect_timeout) for s in self.servers))
        if isinstance(self.approvals, ApprovalService):
            # expiry and card retirement, also for requests left open by a previous run
            self._tasks.append(
                asyncio.create_task(self.approvals.run(self._stopping), name="approval-sweeper")
            )
        for server in self.servers:
            if not server.connections:
                log.warning("mcp_server_unavailable_at_start", server=server.config.name)
        self.log_catalog()

    async def stop(self) -> None:
        self._stopping.set()
        await asyncio.gather(*(cancel_and_wait(t) for t in self._tasks))
        self._tasks.clear()

    @classmethod
    def from_path(
        cls,
        store: Store,
        path: Path | None,
        *,
        metrics: Metrics,
        knowledge: KnowledgeSearch | None = None,
    ) -> ToolService:
        return cls(store, tools_file=load_tools_file(path), metrics=metrics, knowledge=knowledge)

    def log_catalog(self) -> None:
        log.info(
            "tool_catalog",
            offered=self.catalog.names,
            left_out=[f"{x.name} ({x.reason})" for x in self.catalog.left_out],
        )

    def prepare(
        self,
        caller: ToolCaller,
        text: str,
        *,
        count: Callable[[str], int],
        max_tokens: int | None = None,
        asked: Sequence[str] | None = None,
    ) -> Prepared:
        limit = self.file.max_schema_tokens if max_tokens is None else max_tokens
        bundle = select_bundle(
            self.catalog, caller, text, max_tokens=limit, count=count, asked=asked
        )
        self.metrics.routing_decisions.labels(bundle.decision.phase).inc()
        log.info(
            "tool_routing",
            **bundle.decision.to_json(),
            offered=list(bundle.names),
            schema_tokens=bundle.schema_tokens,
        )
        if not bundle.names:
            return Prepared(bundle=bundle, toolbox=None)
        return self._toolbox(bundle, caller)

    async def ask_families(
        self,
        decision: RoutingDecision,
        caller: ToolCaller,
        text: str,
        *,
        models: Sequence[str],
        place: str,
    ) -> tuple[str, ...] | None:
        """The families the model names for a message keyword routing was not sure of:
        ``None`` when no side query is made (confident, or not configured), ``()`` when it
        failed or named none (the read-only bundle)."""
        asker = self.asker
        if asker is None or not asker.wanted(decision.confidence):
            return None
        families = families_of(allowed_policies(self.catalog, caller))
        if not families:
            return None
        found = await asker.ask(text, families, models=models, place=place)
        log.info("tool_routing_asked", families=list(found or ()), failed=found is None)
        return found or ()

    def _toolbox(self, bundle: Bundle, caller: ToolCaller) -> Prepared:
        toolbox = TurnToolbox(
            catalog=self.catalog,
            caller=caller,
            offered=frozenset(bundle.names),
            metrics=self.metrics,
            max_steps=self.file.max_steps,
            approvals=self.approvals,
        )
        return Prepared(bundle=bundle, toolbox=toolbox)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it to end, cancelling again while it runs on: a cancellation
    that lands while the MCP SDK sets a connection up can be absorbed by its anyio task group,
    and the server's reconnect loop then went on forever, and this wait with it (the doctor
    hung on an unreachable server that way)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    if not task.cancelled():
        task.exception()  # retrieved: a task that failed on its way out is not "never retrieved"


async def inspect_tools(settings: Settings) -> tuple[ToolPolicyCatalog, list[str]]:
    """For ``gateway doctor``: the catalog the gateway would build (the tools file's MCP
    servers connected once, then closed) and the servers that could not be reached."""

    async def never(args: Mapping[str, Any], caller: ToolCaller) -> str:
        raise ToolFailed("inspection only")

    tools_file = tools_file_for(
        settings.gateway_tools_file, load_config_file(settings.gateway_config_file)
    )
    catalog = ToolPolicyCatalog(
        [Tool(spec=s, handler=never) for s in BUILTIN_SPECS.values()],
        defaults=DEFAULT_POLICIES,
        tools_file=tools_file,
    )

    def register(source: str, tools: Sequence[Tool]) -> None:
        catalog.remove_source(source)
        for tool in tools:
            catalog.add(tool, defaults={})

    servers = [McpServerConnection(c, register=register) for c in tools_file.servers]
    unreachable: list[str] = []
    for server in servers:
        task = asyncio.create_task(server.run(), name=f"doctor-mcp-{server.config.name}")
        try:
            if not await server.wait_connected(server.config.connect_timeout):
                unreachable.append(server.config.name)
        finally:
            await cancel_and_wait(task)
        # the supervisor withdraws the tools when it stops; keep what was discovered
        register(server.source, server.last_tools)
    return catalog, unreachable
