"""One MCP server, two transports: ``register_tools`` is the single list of the gateway's MCP
tools (sessions, knowledge base, profiles, schedules), used by ``/mcp`` (streamable HTTP,
mounted by ``gateway.http.admin``) and by ``gateway mcp`` over stdio (``serve_stdio``), so an
agent sees the same tools whichever way it is wired."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from gateway import audit

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from gateway.core.ports import PlatformAdapter
    from gateway.core.settings import Settings
    from gateway.http.operator import OperatorService
    from gateway.knowledge.service import Knowledge
    from gateway.profiles.service import Profiles
    from gateway.schedules.service import ScheduleService

log = structlog.get_logger(__name__)


def register_tools(
    server: MCPServer,
    *,
    sessions: OperatorService,
    knowledge: Knowledge,
    profiles: Profiles,
    schedules: ScheduleService,
) -> None:
    """Every MCP tool of the gateway, on ``server``."""
    from gateway.http.mcp import add_session_tools
    from gateway.knowledge.mcp import add_knowledge_tools
    from gateway.profiles.api import add_profile_tools
    from gateway.schedules.api import add_schedule_tools

    add_session_tools(server, sessions)
    add_knowledge_tools(server, knowledge)
    add_profile_tools(server, profiles)
    add_schedule_tools(server, schedules)


async def serve_stdio(settings: Settings, dsn: str) -> int:
    """``gateway mcp``: the same tools over stdin/stdout, against the configured database.

    Messages appended with ``deliver`` go into the outbox, and uploaded documents into the
    knowledge base's job queue; a running ``gateway run`` sends and indexes them (its workers
    poll). Searches use the same embedding model as that process (``EMBEDDING_*``), and the
    profiles come from the same config file (``GATEWAY_CONFIG_FILE``; a bad one stops here
    with exit 2). The platforms' transports are built only to split and format messages
    exactly as that process would; nothing is started."""
    from gateway.core.config_watch import ConfigWatch
    from gateway.core.conversations import Conversations
    from gateway.core.hub import Broadcast
    from gateway.core.ports import AdapterContext, Transport
    from gateway.core.registry import build_adapters, target_of_place
    from gateway.http.mcp import new_mcp_server
    from gateway.http.operator import OperatorService
    from gateway.http.webauth import WebIdentity
    from gateway.knowledge.config import KnowledgeSettings
    from gateway.knowledge.files import build_files
    from gateway.knowledge.service import Knowledge, build_embedder
    from gateway.profiles.service import Profiles
    from gateway.schedules.service import ScheduleService
    from session_store.migrator import migrate
    from session_store.repos.knowledge import KnowledgeStore
    from session_store.repos.operator import OperatorStore
    from session_store.repos.schedules import Schedules
    from session_store.store import Store

    # the config file first: a bad one is named before anything connects
    profiles = Profiles.watching(ConfigWatch(settings.gateway_config_file), settings)
    await migrate(dsn)
    store = await Store.connect(dsn, min_size=1, max_size=4)
    knowledge = Knowledge(
        KnowledgeStore(store.db),
        build_embedder(settings),
        KnowledgeSettings.from_settings(settings),
        files=build_files(settings),
    )
    try:
        context = AdapterContext(
            live=Broadcast(),
            conversations=Conversations(store),
            identity=WebIdentity.from_settings(settings, store),
        )
        adapters = build_adapters(settings, context)
        transports: dict[str, Transport] = {a.platform: a.transport for a in adapters}
        server = new_mcp_server()
        register_tools(
            server,
            sessions=OperatorService(OperatorStore(store), transports=transports),
            knowledge=knowledge,
            profiles=profiles,
            schedules=ScheduleService(Schedules(store.db), targets=target_of_place),
        )
        log.info("mcp_stdio_started", platforms=sorted(transports))
        try:
            # writes over stdio are recorded as the user who started `gateway mcp`
            with audit.acting(audit.cli_actor(), surface="mcp"):
                await server.run_stdio_async()
        finally:
            await _stop_all(adapters)
    finally:
        await knowledge.aclose()
        await store.close()
    return 0


async def _stop_all(adapters: Sequence[PlatformAdapter]) -> None:
    for adapter in adapters:
        try:
            await adapter.stop()
        except Exception:
            # never started here; a stop that trips over that must not hide the real exit
            log.debug("adapter_stop_failed", platform=adapter.platform, exc_info=True)
