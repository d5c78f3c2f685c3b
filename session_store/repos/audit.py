"""The audit log's table: append one event, page through them, keep its month partitions.

``audit_events`` is append-only (a trigger refuses UPDATE and DELETE): nothing here changes
or removes a row. Retention drops whole month partitions (``drop_before``); partitions are
made ahead of time (``ensure_partitions``, on the cold path) and, should an event arrive for
a month that has none yet, made on the spot and the insert retried once."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import asyncpg

from session_store.db import Database, translated
from session_store.errors import StoreError
from session_store.rows import reader
from session_store.sql import load

SQL = load(__package__, "audit.sql")

#: sqlstate of "no partition of relation found for row"
_NO_PARTITION = "23514"
_PARTITION_NAME = re.compile(r"audit_events_[0-9]{4}_[0-9]{2}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    id: int
    at: datetime
    actor: str
    action: str
    object_type: str | None
    object_id: str | None
    outcome: str
    reason: str | None
    remote_addr: str | None
    surface: str
    details: dict[str, Any]


_event = reader(AuditEvent)


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    actor: str
    action: str
    object_type: str | None = None
    object_id: str | None = None
    outcome: str = "ok"
    reason: str | None = None
    remote_addr: str | None = None
    surface: str = "system"
    details: dict[str, Any] | None = None

    def args(self) -> tuple[Any, ...]:
        return (
            self.actor,
            self.action,
            self.object_type,
            self.object_id,
            self.outcome,
            self.reason,
            self.remote_addr,
            self.surface,
            # as text: the same on a pooled connection (jsonb codec) and a caller's own
            json.dumps(self.details or {}),
        )


class AuditStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def append(self, event: NewEvent) -> AuditEvent:
        """Store ``event`` in its own transaction."""
        try:
            async with self._db.connection() as conn:
                return await append_on(conn, event)
        except StoreError as exc:
            if exc.sqlstate != _NO_PARTITION:
                raise
        # no partition for this month yet (the maintenance loop was not running): make it
        await self.ensure_partitions(1)
        async with self._db.connection() as conn:
            return await append_on(conn, event)

    async def page(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        actor: str | None = None,
        action: str | None = None,
        after: tuple[datetime, int] | None = None,
        limit: int = 50,
    ) -> list[AuditEvent]:
        """Newest first; ``action`` matches itself and the actions under it (``kb`` matches
        ``kb.document.delete``); ``after``: the (at, id) of the last event already seen."""
        at, event_id = after if after is not None else (None, None)
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.page, since, until, actor, action, at, event_id, limit)
        return [_event(r) for r in rows]

    async def ensure_partitions(self, ahead: int) -> int:
        """Make the partitions of this month and ``ahead`` months after it; how many were
        new."""
        async with self._db.transaction() as conn:
            if not await conn.fetchval(SQL.lock_maintenance):
                return 0  # another replica is at it
            return int(await conn.fetchval(SQL.ensure_partitions, ahead))

    async def expired_before(self, cutoff: datetime) -> list[str]:
        """The month partitions ``drop_before(cutoff)`` would drop."""
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.expired_partitions, cutoff)
        return [str(r["name"]) for r in rows if _PARTITION_NAME.fullmatch(str(r["name"]))]

    async def drop_before(self, cutoff: datetime) -> list[str]:
        """Drop the month partitions that end on or before ``cutoff``; their names."""
        dropped: list[str] = []
        async with self._db.transaction() as conn:
            if not await conn.fetchval(SQL.lock_maintenance):
                return dropped
            for row in await conn.fetch(SQL.expired_partitions, cutoff):
                name = str(row["name"])
                if not _PARTITION_NAME.fullmatch(name):
                    continue
                await conn.execute(f'DROP TABLE IF EXISTS "{name}"')
                dropped.append(name)
        return dropped


async def append_on(conn: asyncpg.Connection, event: NewEvent) -> AuditEvent:
    """Store ``event`` on ``conn``: inside the caller's transaction when it has one (the
    event is then committed, or rolled back, with the action it records)."""
    with translated():
        row = await conn.fetchrow(SQL.insert, *event.args())
    assert row is not None
    stored = _event(row)
    if isinstance(stored.details, str):  # a connection without the store's jsonb codec
        stored = replace(stored, details=json.loads(stored.details))
    return stored
