"""Wiring and lifecycle: store, adapters, intake, turn scheduler, delivery, HTTP.

Start order: HTTP (webhooks answer 503 until intake is set) -> recover interrupted sends ->
adapters -> workers. Stop order: stop claiming new turns and hand back running ones -> let
in-flight sends finish (bounded) -> adapters (ingress, then their clients) -> HTTP -> the pool
last (caller)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Sequence
from typing import Any

import structlog

from gateway.admin import OperatorSurface
from gateway.agents import Agent, Closeable
from gateway.context import ContextAssembler, ContextPolicy, TokenCounter
from gateway.conversations import Conversations
from gateway.delivery import DeliverySettings, DeliveryWorker
from gateway.errors import ConfigError, StoreError
from gateway.http import HttpServer, build_app
from gateway.hub import Broadcast, Signal
from gateway.intake import CoreIntake
from gateway.knowledge.embed import EmbeddingError
from gateway.knowledge.service import Knowledge, KnowledgeSettings, build_embedder
from gateway.metrics import Metrics
from gateway.ports import AdapterContext, AdapterFactory, PlatformAdapter, Transport
from gateway.settings import Settings
from gateway.summaries import SummaryWorker
from gateway.turns import TurnScheduler, TurnSettings
from session_store.knowledge import KnowledgeStore
from session_store.store import Store

log = structlog.get_logger(__name__)

DRAIN_SECONDS = 10.0


def build_adapters(
    settings: Settings, context: AdapterContext, *, platforms: bool = True
) -> list[PlatformAdapter]:
    """The surfaces the settings enable, built by their packages' ``create_adapter`` (each
    imported only when used: the core never imports an adapter, this composition root builds
    them by name): the platforms and the extra ``GATEWAY_ADAPTERS`` (unless ``platforms`` is
    false), then the web chat."""
    specs: list[tuple[str, str]] = []
    if platforms:
        if settings.telegram_bot_token:
            specs.append(("TELEGRAM_BOT_TOKEN", "adapters.telegram:create_adapter"))
        if settings.slack_bot_token:
            specs.append(("SLACK_BOT_TOKEN", "adapters.slack:create_adapter"))
        if settings.mattermost_url:
            specs.append(("MATTERMOST_URL", "adapters.mattermost:create_adapter"))
        specs.extend(("GATEWAY_ADAPTERS", spec) for spec in settings.gateway_adapters)
    if settings.gateway_web_chat:
        specs.append(("GATEWAY_WEB_CHAT", "adapters.web:create_adapter"))
    return [_load_factory(setting, spec)(settings, context) for setting, spec in specs]


def _load_factory(setting: str, spec: str) -> AdapterFactory:
    module_name, _, attr = spec.partition(":")
    try:
        factory: AdapterFactory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(setting, f"cannot load the adapter {spec!r}: {exc}") from exc
    return factory


class Gateway:
    def __init__(
        self,
        settings: Settings,
        *,
        store: Store,
        agent: Agent,
        adapters: Sequence[PlatformAdapter] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.agent = agent
        self.metrics = Metrics()
        self.live = Broadcast()
        self.turn_wake = Signal()
        self.delivery_wake = Signal()
        self.ready = False
        # --- knowledge base (issue 15): ingest job worker, retrieval for turns -------------
        self.knowledge = Knowledge(
            KnowledgeStore(store.db),
            build_embedder(settings),
            KnowledgeSettings.from_settings(settings),
        )
        self._knowledge_stopping = asyncio.Event()
        self._knowledge_task: asyncio.Task[None] | None = None
        # --- end knowledge base ------------------------------------------------------------
        self.adapter_context = AdapterContext(
            live=self.live, conversations=Conversations(store), files=self.knowledge
        )
        # surfaces given by the caller (tests) replace the configured platforms; the web chat
        # still follows GATEWAY_WEB_CHAT
        self.adapters: list[PlatformAdapter] = [
            *(adapters or ()),
            *build_adapters(settings, self.adapter_context, platforms=adapters is None),
        ]
        self.transports: dict[str, Transport] = {a.platform: a.transport for a in self.adapters}
        self.intake = CoreIntake(
            store,
            metrics=self.metrics,
            turn_wake=self.turn_wake,
            live=self.live,
            leader_interval=max(settings.gateway_poll_seconds * 5, 1.0),
        )
        # the agent's context: per-model budgets, calibrated estimates, rolling summaries
        self.context = ContextAssembler(
            store, ContextPolicy.from_settings(settings), TokenCounter()
        )
        self.summaries = SummaryWorker(store, agent, self.context, metrics=self.metrics)
        self.turns = TurnScheduler(
            store,
            agent,
            self.transports,
            metrics=self.metrics,
            wake=self.turn_wake,
            delivery_wake=self.delivery_wake,
            settings=TurnSettings(
                lease_seconds=settings.gateway_lease_seconds,
                poll_seconds=settings.gateway_poll_seconds,
                workers=settings.gateway_turn_workers,
                busy_mode=settings.agent_busy_mode,
            ),
            context=self.context,
            summaries=self.summaries,
            knowledge=self.knowledge,
        )
        self.delivery = DeliveryWorker(
            store,
            self.transports,
            metrics=self.metrics,
            wake=self.delivery_wake,
            settings=DeliverySettings(
                lease_seconds=max(settings.gateway_lease_seconds, 30.0),
                poll_seconds=settings.gateway_poll_seconds,
                max_attempts=settings.gateway_delivery_max_attempts,
                workers=settings.gateway_delivery_workers,
            ),
        )
        token = settings.gateway_admin_token
        self.operator = OperatorSurface(
            store,
            transports=self.transports,
            admin_token=token.get_secret_value() if token else None,
            delivery_wake=self.delivery_wake,
        )
        # knowledge base (issue 15): files shared in a thread are announced there when read;
        # its MCP tools on /mcp
        self.knowledge.announce = self._announce_file
        self.operator.mcp_extensions.append(self._knowledge_tools)
        routes: list[Any] = []
        # knowledge base (issue 15): /api/v1/kb, behind the admin API's access policy
        from gateway.knowledge.admin_api import kb_pages, knowledge_router

        routes.extend(knowledge_router(self.knowledge, self.operator.policy).routes)
        routes.extend(kb_pages())
        for adapter in self.adapters:
            routes.extend(adapter.http_routes())
        self.app = build_app(self, routes)
        self.http = HttpServer(self.app, settings.gateway_http_host, settings.gateway_http_port)
        self._turns_stopping = asyncio.Event()
        self._delivery_stopping = asyncio.Event()
        self._turn_task: asyncio.Task[None] | None = None
        self._delivery_task: asyncio.Task[None] | None = None
        self._summaries_stopping = asyncio.Event()
        self._summary_task: asyncio.Task[None] | None = None
        self._started_adapters: list[PlatformAdapter] = []

    @property
    def url(self) -> str:
        host = self.settings.gateway_http_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{self.http.port}/"

    async def start(self) -> None:
        await self.operator.start()
        await self.http.start()
        await self.delivery.recover()
        for adapter in self.adapters:
            await adapter.start(self.intake)
            self._started_adapters.append(adapter)
            log.info("adapter_started", platform=adapter.platform)
        self._turn_task = asyncio.create_task(
            self.turns.run(self._turns_stopping), name="turn-scheduler"
        )
        self._summary_task = asyncio.create_task(
            self.summaries.run(self._summaries_stopping), name="summaries"
        )
        self._delivery_task = asyncio.create_task(
            self.delivery.run(self._delivery_stopping), name="delivery"
        )
        # --- knowledge base (issue 15) -------------------------------------------------------
        await self._start_knowledge()
        # --- end knowledge base ------------------------------------------------------------
        self.ready = True
        log.info(
            "gateway_started",
            url=self.url,
            agent=self.agent.name,
            platforms=sorted(self.transports),
        )

    async def stop(self) -> None:
        self.ready = False
        # 1. turns: cancel running agent calls; each hands its session back (release_turn)
        self._turns_stopping.set()
        self.turn_wake.set()
        await _cancel(self._turn_task)
        # cold path: a summary cut short is simply written again on a later turn
        self._summaries_stopping.set()
        await _cancel(self._summary_task)
        if isinstance(self.agent, Closeable):
            await self.agent.aclose()
        # knowledge base (issue 15): a job cut short is taken over when its lease runs out
        self._knowledge_stopping.set()
        await _cancel(self._knowledge_task)
        await self.knowledge.aclose()
        # 2. deliveries: stop claiming, let in-flight sends finish for a bounded time
        self._delivery_stopping.set()
        self.delivery_wake.set()
        if self._delivery_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._delivery_task), DRAIN_SECONDS)
            except TimeoutError:
                await _cancel(self._delivery_task)
        # 3. adapters: stop ingress and close their clients, only now that nothing sends any
        # more. An event that arrives meanwhile is stored (acked after commit) and gets its
        # turn after the next start.
        for adapter in reversed(self._started_adapters):
            try:
                await adapter.stop()
            except Exception:
                # one adapter's failed stop must not keep the others from stopping or the pool
                # from closing (logged with its traceback)
                log.exception("adapter_stop_failed", platform=adapter.platform)
        self._started_adapters.clear()
        # 4. HTTP last among ours (open MCP streams end first so it can drain); the caller
        # closes the pool after this returns
        await self.operator.stop()
        await self.http.stop()
        log.info("gateway_stopped")

    def _knowledge_tools(self, server: Any) -> None:
        from gateway.knowledge.mcp import add_knowledge_tools

        add_knowledge_tools(server, self.knowledge)

    async def _announce_file(self, session_key: str, text: str) -> None:
        await self.operator.service.append(
            session_key, participant="knowledge", content=text, deliver=True
        )

    async def _start_knowledge(self) -> None:
        """Start the ingest job worker; say plainly when retrieval is full-text only."""
        try:
            if not await self.knowledge.store.vector_enabled():
                log.warning(
                    "kb_lexical_only",
                    reason="this PostgreSQL has no pgvector (the vector extension): knowledge "
                    "base retrieval uses full-text search only; install pgvector and run "
                    "`gateway migrate` on a fresh database to add embeddings",
                )
            # EMBEDDING_MODEL changed since a base was built: re-embed it through the jobs
            await self.knowledge.adopt_model()
        except (StoreError, EmbeddingError) as exc:
            log.warning("kb_check_failed", error=str(exc))
        self._knowledge_task = asyncio.create_task(
            self.knowledge.run(self._knowledge_stopping), name="kb-jobs"
        )

    async def refresh_gauges(self) -> None:
        with contextlib.suppress(StoreError):
            counts = await self.store.delivery_counts()
            for status in ("pending", "sending", "sent", "failed"):
                self.metrics.deliveries_by_status.labels(status).set(counts.get(status, 0))
            age = await self.store.oldest_pending_delivery_age()
            self.metrics.oldest_pending_seconds.set(age or 0.0)
            self.metrics.sessions_active.set(await self.operator.ops.active_session_count())


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
