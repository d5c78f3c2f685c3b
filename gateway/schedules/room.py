"""Schedules wired into one gateway: the service every way of making one shares, the
firing loop, the ``/schedule`` command, the admin API routes and operator page (the MCP
tools are registered with all the others by ``gateway.runtime.mcp``). The composition root
(``gateway.runtime.gateway``) holds one and registers each part with one line."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.core.hub import Signal
from gateway.core.metrics import Metrics
from gateway.core.registry import target_of_place
from gateway.http.admin import AccessPolicy
from gateway.schedules.command import ScheduleCommand
from gateway.schedules.service import ScheduleService
from gateway.schedules.worker import ScheduleMetrics, ScheduleWorker
from session_store.repos.schedules import ScheduleRecord, Schedules
from session_store.store import Store

#: posts a message into a session's place (``OperatorService.append``)
Append = Callable[..., Awaitable[Any]]


class ScheduleRoom:
    def __init__(
        self, store: Store, *, metrics: Metrics, turn_wake: Signal, poll_seconds: float
    ) -> None:
        self.service = ScheduleService(Schedules(store.db), targets=target_of_place)
        self.worker = ScheduleWorker(
            self.service,
            metrics=ScheduleMetrics(metrics.registry),
            turn_wake=turn_wake,
            poll_seconds=poll_seconds,
        )
        self.command = ScheduleCommand(self.service)

    def tell_owners_with(self, append: Append) -> None:
        """A paused schedule's owner is told in its place, posted through ``append``."""

        async def tell(schedule: ScheduleRecord, text: str) -> None:
            await append(str(schedule.key), participant="scheduler", content=text, deliver=True)

        self.worker.notify = tell

    def routes(self, policy: AccessPolicy) -> list[Any]:
        """``/api/v1/schedules`` and ``/ops/schedules``."""
        from gateway.schedules.api import schedule_pages, schedules_router

        return [*schedules_router(self.service, policy).routes, *schedule_pages()]
