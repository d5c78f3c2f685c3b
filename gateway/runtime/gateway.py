"""Wiring and lifecycle: store, adapters, intake, turn scheduler, delivery, HTTP.

Start order: HTTP (webhooks answer 503 until intake is set) -> recover interrupted sends ->
adapters -> workers. Stop order: stop claiming new turns and hand back running ones -> let
in-flight sends finish (bounded) -> adapters (ingress, then their clients) -> HTTP -> the pool
last (caller)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Sequence

import structlog

from gateway import audit
from gateway.agents.base import Agent, Closeable
from gateway.agents.breakers import guard_agent
from gateway.agents.prompt import TokenCounter
from gateway.core.config_watch import ConfigWatch, ReloadResult
from gateway.core.conversations import Conversations
from gateway.core.hub import WorkSignal
from gateway.core.lifecycle.supervisor import Supervisor
from gateway.core.metrics import Metrics
from gateway.core.ports import AdapterContext, PlatformAdapter, Transport
from gateway.core.registry import (
    build_adapters,
    known_platforms,
    streaming_overrides,
    webhook_prefixes,
)
from gateway.core.settings import Settings
from gateway.files.voice import build_voice_jobs
from gateway.http.admin import OperatorSurface
from gateway.http.app import HttpServer, build_app
from gateway.http.guard import HttpPolicy, warn_if_exposed
from gateway.http.opsauth import OpsSignIn
from gateway.http.webauth import WebIdentity
from gateway.inbound.ingress import Door, SurfaceIntake
from gateway.inbound.intake import CoreCursors, CoreIntake, CoreInteractions, IngressLifecycle
from gateway.inbound.policy import answer_rules_of
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.files import build_files
from gateway.knowledge.service import Knowledge, build_embedder
from gateway.knowledge.summaries import build_summary_worker
from gateway.outbox.delivery import DeliverySettings, DeliveryWorker
from gateway.outbox.pacing import Pacing, SharedBudget
from gateway.outbox.streaming import Streams, StreamSettings
from gateway.profiles.reload import ReloadAnswers
from gateway.profiles.service import Profiles
from gateway.retention.service import build_retention
from gateway.runtime import memory, upkeep
from gateway.runtime.live import ReplicatedBroadcast
from gateway.runtime.loops import LoopBody, beating, cancel, drain, supervised
from gateway.runtime.minutes import build_minutes
from gateway.runtime.routes import extend_operator, extension_routes
from gateway.runtime.routing import routing_asker
from gateway.runtime.stages import turn_stages
from gateway.runtime.upkeep import LivenessLoop, knowledge_loops
from gateway.schedules.room import ScheduleRoom
from gateway.tools.approvals import ApprovalService
from gateway.tools.catalog import tools_file_for
from gateway.tools.service import ToolService
from gateway.turns.context import ContextAssembler, ContextPolicy
from gateway.turns.scheduler import TurnScheduler, TurnSettings
from gateway.turns.summaries import SummaryWorker
from gateway.usage.config import usage_config
from gateway.usage.service import UsageService
from session_store.records import InboundMessage
from session_store.repos.breakers import Breakers
from session_store.repos.held_files import HeldFileStore
from session_store.repos.knowledge import KnowledgeStore
from session_store.repos.live import LiveChannel
from session_store.repos.liveness import ProcessLiveness
from session_store.repos.previews import PreviewStore
from session_store.repos.reloads import Reloads
from session_store.store import Store

log = structlog.get_logger(__name__)

DRAIN_SECONDS = 10.0
#: seconds between checks of this process's liveness lock (``session_store.repos.liveness``)
LIVENESS_INTERVAL = 0.5


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
        self._build_base(store)
        self._build_knowledge(settings, store)
        self._build_surfaces(settings, store, adapters)
        # people, usage and budgets: [prices] and [budgets] of GATEWAY_CONFIG_FILE
        self.usage = UsageService(store, usage_config(self.config.config), self.metrics)
        self.config.subscribe("usage", usage_config, self.usage.use)
        self._build_agent_side(settings, store, agent)
        self._build_cold_path(settings, store, agent)
        self._build_work(settings, store, agent)
        self._build_http(settings, store)
        self._declare_loops()

    def _build_base(self, store: Store) -> None:
        """Metrics, supervision, this process's liveness, live events and wake-ups."""
        self.metrics = Metrics()
        # every long-lived loop runs supervised; this process's liveness is an
        # advisory lock, so its claims are taken over within seconds if it dies
        self.supervisor = Supervisor(self.metrics)
        self.liveness = ProcessLiveness(store.dsn)
        # live events reach the subscribers of every replica (LISTEN/NOTIFY; gateway/live.py)
        self.live = ReplicatedBroadcast(LiveChannel(store.db))
        # counting wake-ups: one claim per unit of work
        self.turn_wake = WorkSignal()
        self.delivery_wake = WorkSignal()
        self.ready = False

    def _build_knowledge(self, settings: Settings, store: Store) -> None:
        """The knowledge base, voice transcription and approvals."""
        # --- knowledge base: ingest job worker, retrieval for turns -------------
        self.knowledge = Knowledge(
            KnowledgeStore(store.db),
            build_embedder(settings),
            KnowledgeSettings.from_settings(settings),
            files=build_files(settings),
        )
        # --- end knowledge base ------------------------------------------------------------
        # voice notes and audio: transcription jobs (TRANSCRIPTION_BASE_URL)
        self.voice = build_voice_jobs(settings, store)
        if self.voice is not None:
            self.voice.on_late = self._late_transcript
        # approvals in the thread: adapters report clicks to it
        self.approvals: ApprovalService | None = None
        if settings.gateway_tools:
            self.approvals = ApprovalService(
                store,
                metrics=self.metrics,
                seconds=settings.gateway_approval_seconds,
                delivery_wake=self.delivery_wake,
                # a decision makes a parked turn due again: wake this process's workers
                turn_wake=self.turn_wake,
            )

    def _build_surfaces(
        self, settings: Settings, store: Store, adapters: Sequence[PlatformAdapter] | None
    ) -> None:
        """The config file, web identity, the HTTP guard, the surfaces and the intake."""
        # the config file: profiles and places (and every section that subscribes), read
        # now and again on each reload (``reload_config``); a bad file stops start-up here
        self.config = ConfigWatch(settings.gateway_config_file)
        self.profiles = Profiles.watching(self.config, settings)
        # `gateway reload` reaches every replica through the database: this one answers
        self.reloads = Reloads(store.db)
        self.reload_answers = ReloadAnswers(
            self.reloads,
            process_id=lambda: self.store.process_id,
            reload=self.config.reload,
            path=self.config.path,
        )
        # security: web chat sign-in, and what the HTTP guard enforces (routes needing larger
        # bodies declare them through the context's http_policy.allow_larger)
        self.identity = WebIdentity.from_settings(settings, store)
        self.http_policy = HttpPolicy.from_settings(settings)
        self.http_policy.webhook_prefixes = webhook_prefixes()
        # the core's side of the adapters' intake: the inbox behind every door, cursors,
        # interactions (feedback, approval clicks) and the receive loops' lifecycle
        self.intake = CoreIntake(
            store,
            metrics=self.metrics,
            turn_wake=self.turn_wake,
            live=self.live,
            delivery_wake=self.delivery_wake,
        )
        self.cursors = CoreCursors(store)
        self.interactions = CoreInteractions(store)
        self.interactions.approvals = self.approvals  # approval clicks from the adapters
        self.lifecycle = IngressLifecycle(
            store.dsn,
            leader_interval=max(settings.gateway_poll_seconds * 5, 1.0),
            supervisor=self.supervisor,
        )
        self.adapter_context = AdapterContext(
            live=self.live,
            conversations=Conversations(store),
            identity=self.identity,
            http_policy=self.http_policy,
            files=self.knowledge.intake,
            held_files=HeldFileStore(store.db),
            place_answers_all=self.profiles.answers_all,
            lifecycle=self.lifecycle,
        )
        # surfaces given by the caller (tests) replace the configured platforms; the web chat
        # still follows GATEWAY_WEB_CHAT
        self.adapters: list[PlatformAdapter] = [
            *(adapters or ()),
            *build_adapters(settings, self.adapter_context, platforms=adapters is None),
        ]
        self.transports: dict[str, Transport] = {a.platform: a.transport for a in self.adapters}
        # each surface's one door: the answer policy with the rules its plugin declares
        self.doors: dict[str, Door] = {
            a.platform: Door(
                self.intake,
                answer_rules_of(a.platform, settings, place_answers_all=self.profiles.answers_all),
                burst_of=functools.partial(self.profiles.burst_of, settings.gateway_burst_seconds),
                conversation=self.profiles.conversation,
            )
            for a in self.adapters
        }

    def _build_cold_path(self, settings: Settings, store: Store, agent: Agent) -> None:
        """Summaries' charges, documents' summaries, schedules and the audit log's upkeep."""
        self.summaries.charge = self.usage.charge_summary  # summaries are charged to the place
        # documents' summaries, by the agent's model on the cold path (charged to the place)
        self.doc_summaries = build_summary_worker(
            settings,
            self.knowledge,
            agent,
            self.context.policy.window(settings.agent_model),
            charge=self.usage.charge_place,
        )
        self.minutes = build_minutes(settings, self, agent)  # closed sessions' minutes
        # schedules: fired once across replicas as turns of their places
        self.schedule_room = ScheduleRoom(
            store,
            metrics=self.metrics,
            turn_wake=self.turn_wake,
            poll_seconds=settings.gateway_poll_seconds,
            # an operator's schedule goes to a platform this gateway serves
            platforms=lambda: known_platforms() | self.transports.keys(),
        )
        self.schedules = self.schedule_room.service
        # retention on one replica (the inbox's and the audit log's months too): the cold path
        self.retention = build_retention(
            settings, self.config.config, store.db, self.metrics.registry
        )
        #: audit records written in the background (config reloads from a signal)
        self._audit_writes: set[asyncio.Task[bool]] = set()

    def _declare_loops(self) -> None:
        """Each group of supervised loops: its stop event and its task (set by ``start``)."""
        self._live_stopping = asyncio.Event()
        self._live_task: asyncio.Task[None] | None = None
        self._knowledge_stopping = asyncio.Event()
        self._knowledge_task: asyncio.Task[None] | None = None
        self._schedules_stopping = asyncio.Event()
        self._schedules_task: asyncio.Task[None] | None = None
        self._turns_stopping = asyncio.Event()
        self._delivery_stopping = asyncio.Event()
        self._turn_task: asyncio.Task[None] | None = None
        self._delivery_task: asyncio.Task[None] | None = None
        self._summaries_stopping = asyncio.Event()
        self._summary_task: asyncio.Task[None] | None = None
        self._started_adapters: list[PlatformAdapter] = []
        self._liveness_stopping = asyncio.Event()
        self._liveness_task: asyncio.Task[None] | None = None
        self._audit_stopping = asyncio.Event()
        self._audit_task: asyncio.Task[None] | None = None
        self._reload_stopping = asyncio.Event()
        self._reload_task: asyncio.Task[None] | None = None

    def _build_agent_side(self, settings: Settings, store: Store, agent: Agent) -> None:
        """The agent's context, its summaries and its tools."""
        # the agent's context: per-model budgets, calibrated estimates, rolling summaries
        self.context = ContextAssembler(
            store, ContextPolicy.from_settings(settings), TokenCounter()
        )
        self.summaries = SummaryWorker(store, agent, self.context, metrics=self.metrics)
        # per-model circuit breakers shared by the replicas (agents that consult them)
        self.breakers = guard_agent(agent, Breakers(store.db), self.metrics, settings)
        # tools: built-ins + the tools file's MCP servers, under a fail-closed policy
        self.tools: ToolService | None = None
        if settings.gateway_tools:
            self.tools = ToolService(
                store,
                tools_file=tools_file_for(settings.gateway_tools_file, self.config.config),
                metrics=self.metrics,
                knowledge=self.knowledge.retrieval,
            )
            self.tools.approvals = self.approvals
            self.tools.asker = routing_asker(settings, agent, self.usage)
            if self.approvals is not None:
                self.approvals.transports = self.transports

    def _build_work(self, settings: Settings, store: Store, agent: Agent) -> None:
        """Streaming, pacing, the turn scheduler and the delivery worker."""
        # streaming: previews while a streaming agent writes; the echo agent and
        # any other one-piece agent never touch them
        previews = PreviewStore(store.db)
        # one pacing budget per bot and chat for sends, previews and typing: in memory while
        # this is the only live gateway process, PostgreSQL's while peers live (the liveness
        # loop counts them: ``upkeep.LivenessLoop``)
        self.pacing = Pacing(SharedBudget(previews))
        self.streams = Streams(
            previews,
            self.transports,
            StreamSettings(
                enabled=settings.gateway_streaming,
                per_platform=streaming_overrides(settings),
                edit_seconds=settings.gateway_stream_edit_seconds,
            ),
            metrics=self.metrics,
            budget=self.pacing,
        )
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
                while_answering=settings.gateway_while_answering,
            ),
            stages=turn_stages(self),
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
            previews=previews,
            budget=self.pacing,
        )
        # a finished turn hands its first delivery to this worker already claimed
        self.turns.handoff = self.delivery

    def _build_http(self, settings: Settings, store: Store) -> None:
        """The operator surface, the routes of the knowledge base and the surfaces, the app."""
        token = settings.gateway_admin_token
        self.operator = OperatorSurface(
            store,
            transports=self.transports,
            admin_token=token.get_secret_value() if token else None,
            delivery_wake=self.delivery_wake,
            # GATEWAY_OPS_AUTH=oidc: operators sign in as themselves, each with a role
            signed_in=OpsSignIn.from_settings(settings, store.db),
        )
        extend_operator(self)
        self.app = build_app(self, extension_routes(self))
        self.http = HttpServer(
            self.app,
            settings.gateway_http_host,
            settings.gateway_http_port,
            limit_concurrency=settings.gateway_http_concurrency,
        )

    @property
    def url(self) -> str:
        host = self.settings.gateway_http_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{self.http.port}/"

    def _supervised(
        self, name: str, bodies: Sequence[LoopBody], stopping: asyncio.Event
    ) -> asyncio.Task[None]:
        return supervised(self.supervisor, name, bodies, stopping)

    def intake_of(self, platform: str) -> SurfaceIntake:
        """What the adapter of ``platform`` gets at start: its door and the core's parts."""
        return SurfaceIntake(
            ingest=self.doors[platform],
            cursors=self.cursors,
            interactions=self.interactions,
            lifecycle=self.lifecycle,
            places=self.profiles,
        )

    async def start(self) -> None:
        """HTTP first (webhooks answer 503 until intake is set), this process's liveness,
        interrupted sends recovered, the surfaces, then the workers."""
        warn_if_exposed(self.settings)
        memory.install_dump_signal()  # heap snapshots on SIGUSR2 (GATEWAY_TRACEMALLOC_DUMP)
        if self.tools is not None:
            await self.tools.start()  # MCP servers discovered, tools left out logged
        await self.http.start()
        await self._start_liveness()
        await self.delivery.recover()
        for adapter in self.adapters:
            await adapter.start(self.intake_of(adapter.platform))
            self._started_adapters.append(adapter)
            log.info("adapter_started", platform=adapter.platform)
        self._start_workers()
        # --- knowledge base -------------------------------------------------------
        await self._start_knowledge()
        # --- end knowledge base ------------------------------------------------------------
        self.ready = True
        log.info(
            "gateway_started",
            url=self.url,
            agent=self.agent.name,
            platforms=sorted(self.transports),
        )

    async def _start_liveness(self) -> None:
        """This process's liveness first: its claims carry its id from the first one on."""
        keeper = LivenessLoop(self.store, self.liveness, self.pacing)
        await keeper.ensure()
        self._liveness_task = self._supervised(
            "liveness",
            [("liveness", keeper.run, LIVENESS_INTERVAL * 10, True)],
            self._liveness_stopping,
        )

    def _start_workers(self) -> None:
        """The live relay, the turn, summary and delivery workers, schedules and the audit
        log's upkeep, each group supervised."""
        # the live relay is cosmetic (streams reload history on reconnect): not required
        self._live_task = self._supervised(
            "live-relay", [("live-relay", beating(self.live.run), None, False)], self._live_stopping
        )
        poll = self.settings.gateway_poll_seconds
        lease = self.settings.gateway_lease_seconds
        # a loop is wedged after several of its intervals without progress: idle polls,
        # items and lease renewals all count (an agent call renews every lease/3)
        turn_stall = max(5 * poll, lease)
        delivery_stall = max(5 * poll, self.delivery.lease_seconds)
        self._turn_task = self._supervised(
            "turn-scheduler",
            [
                (f"turn-{n}", self.turns.work, turn_stall, True)
                for n in range(self.settings.gateway_turn_workers)
            ],
            self._turns_stopping,
        )
        self._summary_task = self._supervised(
            "summaries",
            # cold path: not required for readiness, and a summary may take an agent's while
            [
                (f"summary-{n}", self.summaries.work, None, False)
                for n in range(self.summaries.workers)
            ],
            self._summaries_stopping,
        )
        self._delivery_task = self._supervised(
            "delivery",
            [
                (
                    "delivery-recovery",
                    self.delivery.recovery_loop,
                    5 * self.delivery.recovery_interval,
                    True,
                ),
                *(
                    (f"delivery-{n}", self.delivery.work, delivery_stall, True)
                    for n in range(self.settings.gateway_delivery_workers)
                ),
            ],
            self._delivery_stopping,
        )
        # schedules: fired once across replicas; required like the turn workers
        self._schedules_task = self._supervised(
            "schedules",
            [("schedules", self.schedule_room.worker.work, max(5 * poll, 10.0), True)],
            self._schedules_stopping,
        )
        self._audit_task = self._supervised(
            "retention",
            [("retention", beating(self.retention.run), None, False)],
            self._audit_stopping,
        )
        self._reload_task = self._supervised(
            "config-reload",
            [("config-reload", self.reload_answers.run, None, False)],
            self._reload_stopping,
        )

    async def stop(self) -> None:
        """Stop in order. Never raises because a loop died earlier: each step is logged
        and the next one runs."""
        try:
            await self._stop()
        finally:
            self._liveness_stopping.set()
            with contextlib.suppress(Exception):
                await cancel(self._liveness_task)
            with contextlib.suppress(Exception):
                await self.liveness.close()

    async def _stop(self) -> None:
        self.ready = False
        # 0. schedules: a firing is one transaction, so cancelling loses nothing; reload
        # requests are answered by the replicas still running
        self._schedules_stopping.set()
        await cancel(self._schedules_task)
        self._reload_stopping.set()
        await cancel(self._reload_task)
        # 1. turns: cancel running agent calls; each hands its session back (release_turn)
        self._turns_stopping.set()
        self.turn_wake.wake_all()
        await cancel(self._turn_task)
        # cold path: a summary cut short is simply written again on a later turn
        self._summaries_stopping.set()
        await cancel(self._summary_task)
        if isinstance(self.agent, Closeable):
            await self.agent.aclose()
        if self.tools is not None:
            await self.tools.stop()
        self._audit_stopping.set()
        await cancel(self._audit_task)
        # knowledge base: a job cut short is taken over when its lease runs out
        self._knowledge_stopping.set()
        await cancel(self._knowledge_task)
        await self.knowledge.aclose()
        if self.voice is not None:
            await self.voice.close()
        # 2. deliveries: stop claiming, let in-flight sends finish for a bounded time
        self._delivery_stopping.set()
        self.delivery_wake.wake_all()
        await drain(self._delivery_task, DRAIN_SECONDS, "delivery_task_failed")
        # handed-over deliveries nobody started go back to the table
        try:
            await self.delivery.hand_back()
        except Exception:  # shutdown goes on; recovery finds them later
            log.exception("delivery_hand_back_failed")
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
        # 5. the live relay (nothing publishes any more)
        self._live_stopping.set()
        await drain(self._live_task, 5.0, "live_relay_failed")
        log.info("gateway_stopped")

    def reload_config(self) -> ReloadResult:
        """Read the config file again (``gateway reload``, SIGHUP from a service manager):
        every subscriber gets it, or a broken file keeps what is in force. The audit log
        records each one (in the background: a signal handler cannot wait)."""
        result = self.config.reload()
        recorded = audit.record(
            self.store,
            "config.reload",
            ("config", str(self.config.path or "")),
            outcome="ok" if result.ok else "failed",
            reason=result.error,
        )
        task = asyncio.get_running_loop().create_task(recorded)
        self._audit_writes.add(task)
        task.add_done_callback(self._audit_writes.discard)
        return result

    async def _late_transcript(self, message: InboundMessage) -> None:
        """A voice note heard after its turn gave up waiting: stored as the person's message
        (once: the inbox dedupes it) and answered."""
        stored = await self.store.inbox.ingest(message, raw=None)
        self.turn_wake.set(stored.session_id)

    async def _start_knowledge(self) -> None:
        loops = await knowledge_loops(self.knowledge, self.doc_summaries, self.minutes)
        self._knowledge_task = self._supervised("kb-jobs", loops, self._knowledge_stopping)

    async def refresh_gauges(self) -> None:
        await upkeep.refresh_gauges(self.metrics, self.store, self.operator.ops)
