"""Wiring and lifecycle: store, adapters, intake, turn scheduler, delivery, HTTP.

Start order: HTTP (webhooks answer 503 until intake is set) -> recover interrupted sends ->
adapters -> workers. Stop order: stop intake (adapters) -> stop claiming new turns and hand
back running ones -> let in-flight sends finish (bounded) -> HTTP -> the pool last (caller)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import Sequence
from typing import Any

import asyncpg
import structlog

from adapters.web import WebAdapter
from gateway.agents import Agent
from gateway.delivery import DeliverySettings, DeliveryWorker
from gateway.errors import ConfigError, StoreError
from gateway.http import HttpServer, build_app
from gateway.hub import Broadcast, Signal
from gateway.intake import CoreIntake
from gateway.metrics import Metrics
from gateway.ports import PlatformAdapter, Transport
from gateway.settings import Settings
from gateway.turns import TurnScheduler, TurnSettings
from session_store.leader import LeaderLock
from session_store.store import Store

log = structlog.get_logger(__name__)

DRAIN_SECONDS = 10.0


def build_platform_adapters(settings: Settings) -> list[PlatformAdapter]:
    """The platform adapters the settings enable (each package imported only when used)."""
    wanted = []
    if settings.telegram_bot_token:
        wanted.append("adapters.telegram")
    if settings.slack_bot_token:
        wanted.append("adapters.slack")
    if settings.mattermost_url:
        wanted.append("adapters.mattermost")
    adapters: list[PlatformAdapter] = []
    for module_name in wanted:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                module_name.split(".")[-1].upper(), f"adapter unavailable: {exc}"
            ) from exc
        adapters.append(module.create_adapter(settings))
    for spec in settings.gateway_adapters:
        module_name, _, attr = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError("GATEWAY_ADAPTERS", f"cannot load {spec!r}: {exc}") from exc
        adapters.append(factory(settings))
    return adapters


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
        platform_adapters = (
            list(adapters) if adapters is not None else build_platform_adapters(settings)
        )
        self.adapters: list[PlatformAdapter] = platform_adapters
        if settings.gateway_web_chat:
            self.adapters.append(WebAdapter(store, self.live))
        self.transports: dict[str, Transport] = {a.platform: a.transport for a in self.adapters}
        self.intake = CoreIntake(
            store, metrics=self.metrics, turn_wake=self.turn_wake, live=self.live
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
            ),
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
        routes: list[Any] = []
        for adapter in self.adapters:
            routes.extend(adapter.http_routes())
        self.app = build_app(self, routes)
        self.http = HttpServer(self.app, settings.gateway_http_host, settings.gateway_http_port)
        self._turns_stopping = asyncio.Event()
        self._delivery_stopping = asyncio.Event()
        self._turn_task: asyncio.Task[None] | None = None
        self._delivery_task: asyncio.Task[None] | None = None
        self._started_adapters: list[PlatformAdapter] = []
        # single-connection ingress runs only where this process holds the leader lock
        self._leader_adapters = [a for a in self.adapters if getattr(a, "needs_leader", False)]
        self._leading: list[PlatformAdapter] = []
        self._leader_stopping = asyncio.Event()
        self._leader_task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = self.settings.gateway_http_host
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        return f"http://{shown}:{self.http.port}/"

    async def start(self) -> None:
        await self.http.start()
        await self.delivery.recover()
        for adapter in self.adapters:
            if adapter in self._leader_adapters:
                continue
            await adapter.start(self.intake)
            self._started_adapters.append(adapter)
            log.info("adapter_started", platform=adapter.platform)
        if self._leader_adapters:
            self._leader_task = asyncio.create_task(self._lead(), name="leader-election")
        self._turn_task = asyncio.create_task(
            self.turns.run(self._turns_stopping), name="turn-scheduler"
        )
        self._delivery_task = asyncio.create_task(
            self.delivery.run(self._delivery_stopping), name="delivery"
        )
        self.ready = True
        log.info(
            "gateway_started",
            url=self.url,
            agent=self.agent.name,
            platforms=sorted(self.transports),
        )

    async def stop(self) -> None:
        self.ready = False
        # 1. stop intake: no new inbound events (leader-only ingress first)
        self._leader_stopping.set()
        if self._leader_task is not None:
            await self._leader_task
        for adapter in reversed(self._started_adapters):
            try:
                await adapter.stop()
            except Exception:
                # one adapter's failed stop must not keep the others from stopping or the pool
                # from closing (logged with its traceback)
                log.exception("adapter_stop_failed", platform=adapter.platform)
        self._started_adapters.clear()
        # 2. turns: cancel running agent calls; each hands its session back (release_turn)
        self._turns_stopping.set()
        self.turn_wake.set()
        await _cancel(self._turn_task)
        # 3. deliveries: stop claiming, let in-flight sends finish for a bounded time
        self._delivery_stopping.set()
        self.delivery_wake.set()
        if self._delivery_task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._delivery_task), DRAIN_SECONDS)
            except TimeoutError:
                await _cancel(self._delivery_task)
        # 4. HTTP last among ours; the caller closes the pool after this returns
        await self.http.stop()
        log.info("gateway_stopped")

    async def _lead(self) -> None:
        """Hold one advisory lock per single-connection ingress; start that ingress only while
        holding it. A replica that dies loses its connection and with it the lock, and another
        replica's next attempt takes over."""
        interval = max(self.settings.gateway_poll_seconds * 5, 1.0)
        locks = {
            a: LeaderLock(self.store.dsn, getattr(a, "leader_name", a.platform))
            for a in self._leader_adapters
        }
        try:
            while not self._leader_stopping.is_set():
                for adapter, lock in locks.items():
                    try:
                        if adapter not in self._leading:
                            if await lock.try_acquire():
                                log.info("leader_acquired", platform=adapter.platform)
                                await adapter.start(self.intake)
                                self._leading.append(adapter)
                        elif not await lock.check():
                            log.warning("leader_lost", platform=adapter.platform)
                            await self._stop_adapter(adapter)
                    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                        log.warning("leader_election_failed", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._leader_stopping.wait(), interval)
        finally:
            for adapter in list(self._leading):
                await self._stop_adapter(adapter)
            for lock in locks.values():
                await lock.release()

    async def _stop_adapter(self, adapter: PlatformAdapter) -> None:
        if adapter in self._leading:
            self._leading.remove(adapter)
        try:
            await adapter.stop()
        except Exception:
            # a failed stop must not keep other adapters running (logged with its traceback)
            log.exception("adapter_stop_failed", platform=adapter.platform)

    async def refresh_gauges(self) -> None:
        with contextlib.suppress(StoreError):
            counts = await self.store.delivery_counts()
            for status in ("pending", "sending", "sent", "failed"):
                self.metrics.deliveries_by_status.labels(status).set(counts.get(status, 0))
            age = await self.store.oldest_pending_delivery_age()
            self.metrics.oldest_pending_seconds.set(age or 0.0)


async def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
