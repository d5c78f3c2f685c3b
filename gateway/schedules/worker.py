"""The firing loop: a long-lived, supervised worker on every replica.

Each pass fires what is due (``Schedules.fire_due``: one transaction under row locks that
other replicas skip, the (schedule, due time) pair as the fence) and wakes the turn workers:
the firing's question then runs as a normal turn of the place's session, under the turn
scheduler's lease and fencing token, and its answer goes out through the outbox. Then it
settles the firings whose turn has run: sent, or failed with the platform's reason; five
failures in a row, or a place that is gone, pause the schedule and its owner is told there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.core.errors import GatewayError, StoreError
from gateway.core.hub import Signal
from gateway.core.lifecycle.supervisor import Beat, item_backoff, no_beat, pause
from gateway.schedules.service import ScheduleService
from session_store.repos.schedules import Fired, OpenFiring, ScheduleRecord

log = structlog.get_logger(__name__)

#: failed firings in a row that pause a schedule
PAUSE_AFTER = 5
#: due schedules fired per transaction
BATCH = 50
#: a delivery error that says the place itself is gone (or closed to the bot): pause at once
PLACE_GONE = (
    "chat not found",
    "channel_not_found",
    "channel not found",
    "is_archived",
    "thread not found",
    "not_in_channel",
    "bot was kicked",
    "chat_write_forbidden",
)

Notify = Callable[[ScheduleRecord, str], Awaitable[None]]


class ScheduleMetrics:
    """``gateway_schedule_firings_total{outcome}`` and the lateness of each firing."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.firings = Counter(
            "gateway_schedule_firings",
            "Schedule firings by outcome (queued, skipped, sent, failed, paused)",
            ["outcome"],
            registry=registry,
        )
        self.lateness = Histogram(
            "gateway_schedule_lateness_seconds",
            "Seconds between a firing's due time and its question being asked",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600),
            registry=registry,
        )


@dataclass(frozen=True, slots=True)
class Settled:
    outcome: str
    reason: str | None


def outcome_of(firing: OpenFiring) -> Settled | None:
    """A firing's outcome from its answer's deliveries; ``None`` while they are on the way."""
    if firing.answer_seq is None:
        return Settled("failed", "the turn gave no answer")
    if firing.apology:
        return Settled("failed", "the agent failed to answer")
    if firing.failed:
        return Settled("failed", firing.error or "delivery failed")
    if firing.parts and firing.sent == firing.parts:
        return Settled("sent", None)
    return None


def place_gone(reason: str | None) -> bool:
    text = (reason or "").lower()
    return any(marker in text for marker in PLACE_GONE)


class ScheduleWorker:
    def __init__(
        self,
        service: ScheduleService,
        *,
        metrics: ScheduleMetrics,
        turn_wake: Signal,
        poll_seconds: float,
        notify: Notify | None = None,
    ) -> None:
        self.service = service
        self.metrics = metrics
        self._turn_wake = turn_wake
        self._poll = poll_seconds
        self.notify = notify

    async def work(self, stopping: asyncio.Event, beat: Beat = no_beat) -> None:
        """Fire, settle, wait; a pass that fails (the database away) is retried after a
        backoff and the loop goes on."""
        failures = 0
        while not stopping.is_set():
            beat()
            try:
                fired = await self.fire_once()
                await self.settle_once()
                failures = 0
            except StoreError as exc:
                failures += 1
                log.warning("schedule_pass_failed", error=str(exc), failures=failures)
                await pause(item_backoff(failures), stopping)
                continue
            if len(fired) < BATCH:
                await pause(self._poll, stopping)

    async def fire_once(self) -> list[Fired]:
        fired = await self.service.repo.fire_due(
            self.service.decide, now=self.service.clock(), limit=BATCH
        )
        for f in fired:
            self.record(f)
        return fired

    def record(self, f: Fired) -> None:
        outcome = "queued" if f.action == "fire" else "skipped"
        self.metrics.firings.labels(outcome).inc()
        late = (self.service.clock() - f.due_at).total_seconds()
        if f.action == "fire":
            self.metrics.lateness.observe(max(late, 0.0))
            self._turn_wake.set(f.session_id)
        log.info(
            "schedule_fired" if f.action == "fire" else "schedule_skipped",
            schedule_id=f.schedule.id,
            place=f.schedule.place,
            due_at=f.due_at.isoformat(),
            late_seconds=round(late, 3),
            session_id=f.session_id,
            seq_no=f.seq_no,
        )

    async def settle_once(self) -> int:
        settled = 0
        for firing in await self.service.repo.open_firings():
            result = outcome_of(firing)
            if result is None:
                continue
            gone = result.outcome == "failed" and place_gone(result.reason)
            schedule = await self.service.repo.settle(
                firing.id,
                outcome="sent" if result.outcome == "sent" else "failed",
                reason=result.reason,
                pause_after=1 if gone else PAUSE_AFTER,
                pause_reason=(
                    f"its place cannot be posted in: {result.reason}"
                    if gone
                    else f"its last {PAUSE_AFTER} firings failed (last: {result.reason})"
                ),
            )
            if schedule is None:
                continue  # another replica settled it
            settled += 1
            self.metrics.firings.labels(result.outcome).inc()
            log.info(
                "schedule_firing_settled",
                schedule_id=schedule.id,
                firing_id=firing.id,
                outcome=result.outcome,
                reason=result.reason,
            )
            if schedule.status == "paused" and (gone or schedule.failures == PAUSE_AFTER):
                await self._paused(schedule)
        return settled

    async def _paused(self, schedule: ScheduleRecord) -> None:
        self.metrics.firings.labels("paused").inc()
        log.warning("schedule_paused", schedule_id=schedule.id, reason=schedule.paused_reason)
        if self.notify is None:
            return
        text = (
            f"Schedule {schedule.id} ({schedule.owner}) is paused: {schedule.paused_reason}. "
            f"Cancel it with /schedule cancel {schedule.id}."
        )
        try:
            await self.notify(schedule, text)
        except GatewayError as exc:  # the pause stands; the notice is best effort
            log.warning("schedule_pause_notice_failed", schedule_id=schedule.id, error=str(exc))
