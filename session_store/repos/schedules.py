"""Schedules and their firings (migration 0018): what the schedules room
(``gateway.schedules``) stores. Times are computed by the caller (the cron library lives in
the gateway); this module only writes them, under the row locks that make each firing once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from session_store.db import Database
from session_store.rows import reader
from session_store.sql import load
from session_store.values import ReplyTarget, SessionKey

SQL = load(__package__, "schedules.sql")

ScheduleStatus = Literal["active", "paused", "done"]
FiringOutcome = Literal["queued", "sent", "failed", "skipped"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRecord:
    id: int
    name: str | None
    platform: str
    scope: str
    chat_id: str
    thread_id: str | None
    prompt: str
    owner: str
    time_zone: str
    fire_at: datetime | None
    cron: str | None
    status: ScheduleStatus
    paused_reason: str | None
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_outcome: str | None
    failures: int
    created_at: datetime

    @property
    def key(self) -> SessionKey:
        return SessionKey(
            platform=self.platform, scope=self.scope, chat_id=self.chat_id, thread_id=self.thread_id
        )

    @property
    def place(self) -> str:
        """``platform:scope:chat[:thread]`` as ``--place`` takes it back
        (``SessionKey.place_text``: a Matrix room's ``:`` written ``%3A``)."""
        return self.key.place_text


@dataclass(frozen=True, slots=True, kw_only=True)
class FiringRecord:
    id: int
    schedule_id: int
    due_at: datetime
    fired_at: datetime
    outcome: FiringOutcome
    reason: str | None
    session_id: int | None
    seq_no: int | None
    settled_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenFiring:
    """A queued firing whose turn has run, and what became of its answer."""

    id: int
    schedule_id: int
    session_id: int
    seq_no: int
    answer_seq: int | None
    parts: int
    sent: int
    failed: int
    error: str | None
    apology: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What a firing loop decided for one due schedule (``Schedules.fire_due``)."""

    #: ``fire``: ask the prompt now; ``skip``: recorded as skipped (too late)
    action: Literal["fire", "skip"]
    #: the next firing (``None``: a one-shot is done)
    next_fire_at: datetime | None
    #: where the answer goes (for ``fire``)
    target: ReplyTarget | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Fired:
    schedule: ScheduleRecord
    due_at: datetime
    action: Literal["fire", "skip"]
    next_fire_at: datetime | None = None
    session_id: int | None = None
    seq_no: int | None = None


_schedule = reader(ScheduleRecord)
_firing = reader(FiringRecord)
_open = reader(OpenFiring)

Decide = Callable[[ScheduleRecord, datetime], Decision]


class Schedules:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self,
        *,
        key: SessionKey,
        prompt: str,
        owner: str,
        time_zone: str,
        fire_at: datetime | None,
        cron: str | None,
        next_fire_at: datetime | None,
        name: str | None = None,
    ) -> ScheduleRecord:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.add_schedule,
                name,
                key.platform,
                key.scope,
                key.chat_id,
                key.thread_id,
                prompt,
                owner,
                time_zone,
                fire_at,
                cron,
                next_fire_at,
            )
        assert row is not None
        return _schedule(row)

    async def get(self, schedule_id: int) -> ScheduleRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.get_schedule, schedule_id)
        return None if row is None else _schedule(row)

    async def listing(
        self, *, place: SessionKey | None = None, owner: str | None = None, limit: int = 1000
    ) -> list[ScheduleRecord]:
        where: tuple[str | None, ...] = (None, None, None, None)
        if place is not None:
            where = (place.platform, place.scope, place.chat_id, place.thread_id)
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.list_schedules, *where, owner, limit)
        return [_schedule(r) for r in rows]

    async def delete(self, schedule_id: int) -> ScheduleRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.delete_schedule, schedule_id)
        return None if row is None else _schedule(row)

    async def pause(self, schedule_id: int, reason: str) -> ScheduleRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.pause_schedule, schedule_id, reason)
        return None if row is None else _schedule(row)

    async def firings(self, schedule_id: int, *, limit: int = 20) -> list[FiringRecord]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.recent_firings, schedule_id, limit)
        return [_firing(r) for r in rows]

    async def firing_counts(self) -> dict[str, int]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.firing_counts)
        return {str(r["outcome"]): int(r["n"]) for r in rows}

    async def fire_due(self, decide: Decide, *, now: datetime, limit: int = 50) -> list[Fired]:
        """Fire up to ``limit`` due schedules in ONE transaction: each is locked (others
        pass over it), ``decide`` says fire or skip and when next, and its firing, its
        question and its next time are written together, or not at all."""
        async with self.db.transaction() as conn:
            rows = await conn.fetch(SQL.lock_due, limit, now)
            fired = [await self._fire(conn, _schedule(r), decide, now) for r in rows]
            if fired:
                await conn.execute(
                    SQL.advance,
                    [f.schedule.id for f in fired],
                    [f.next_fire_at for f in fired],
                    [f.due_at for f in fired],
                    ["skipped" if f.action == "skip" else None for f in fired],
                )
        return fired

    async def fire_now(self, schedule_id: int, decide: Decide, *, now: datetime) -> Fired | None:
        """``gateway schedule run``: one firing of ``schedule_id`` due now, whatever its
        time; its regular firings stay as they are."""
        async with self.db.transaction() as conn:
            row = await conn.fetchrow(SQL.lock_schedule, schedule_id)
            if row is None:
                return None
            return await self._fire(conn, _schedule(row), decide, now, due_at=now)

    async def _fire(
        self,
        conn: Any,
        schedule: ScheduleRecord,
        decide: Decide,
        now: datetime,
        *,
        due_at: datetime | None = None,
    ) -> Fired:
        due = due_at or schedule.next_fire_at or now
        decision = decide(schedule, due)
        if decision.action == "skip":
            await conn.execute(SQL.skip_firing, schedule.id, due, decision.reason)
            return Fired(
                schedule=schedule, due_at=due, action="skip", next_fire_at=decision.next_fire_at
            )
        assert decision.target is not None
        key = schedule.key
        asked = await conn.fetchrow(
            SQL.fire,
            key.platform,
            key.scope,
            key.chat_id,
            key.thread_id,
            decision.target.to_json(),
            schedule.prompt,
            _question_metadata(schedule),
            schedule.id,
            due,
        )
        return Fired(
            schedule=schedule,
            due_at=due,
            action="fire",
            next_fire_at=decision.next_fire_at,
            session_id=asked["session_id"],
            seq_no=asked["seq_no"],
        )

    async def open_firings(self, *, limit: int = 200) -> list[OpenFiring]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.open_firings, limit)
        return [_open(r) for r in rows]

    async def settle(
        self,
        firing_id: int,
        *,
        outcome: FiringOutcome,
        reason: str | None,
        pause_after: int,
        pause_reason: str,
    ) -> ScheduleRecord | None:
        """Record a firing's outcome (once, whichever replica comes first); the schedule as
        it is after, or ``None`` when another replica settled it."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.settle_firing, firing_id, outcome, reason, pause_after, pause_reason
            )
        return None if row is None else _schedule(row)


def _question_metadata(schedule: ScheduleRecord) -> Mapping[str, Any]:
    """``schedule_id`` marks the question as a schedule's (never a person's); ``owner`` is
    who is charged for it (the statement adds the due time)."""
    return {"schedule_id": schedule.id, "owner": schedule.owner}
