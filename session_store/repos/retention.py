"""Retention's statements: the inbox's partitions (made ahead, whole months dropped), raw
payloads, dead letters, dedupe keys, the usage ledger and closed sessions, each removed in
bounded batches of short transactions (``gateway.retention`` decides what and when)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from session_store.db import Database
from session_store.sql import load

SQL = load(__package__, "retention.sql")

_INBOX_PARTITION = re.compile(r"inbound_events_(before_)?[0-9]{4}_[0-9]{2}")
#: longest wait for the parent's lock when a month is detached: ingest queues behind it, so
#: the drop gives up and is retried on the next run rather than stall the hot path
LOCK_TIMEOUT = "2s"


@dataclass(frozen=True, slots=True)
class InboxPartition:
    name: str
    #: the first day after the range it holds (UTC)
    ends: date
    #: PostgreSQL's estimate
    rows: int


@dataclass(frozen=True, slots=True)
class ExportedSession:
    session: dict[str, Any]
    messages: list[dict[str, Any]]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


class RetentionStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    # --- the inbox's partitions ---------------------------------------------------------

    async def ensure_partitions(self, ahead: int) -> int:
        """Make this month's inbox partition and ``ahead`` more; how many were new."""
        async with self._db.transaction() as conn:
            if not await conn.fetchval(SQL.lock_maintenance):
                return 0  # another replica (or a `gateway retention run`) is at it
            return int(await conn.fetchval(SQL.ensure_partitions, ahead))

    async def inbox_partitions(self) -> list[InboxPartition]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.inbox_partitions)
        return [InboxPartition(r["name"], r["ends"], int(r["rows"])) for r in rows]

    async def drop_partition(self, name: str) -> bool:
        """DETACH and DROP one inbox partition; False when another runner holds the
        maintenance lock."""
        if not _INBOX_PARTITION.fullmatch(name):
            raise ValueError(f"not an inbox partition: {name}")
        async with self._db.transaction() as conn:
            if not await conn.fetchval(SQL.lock_maintenance):
                return False
            await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            await conn.execute(f'ALTER TABLE inbound_events DETACH PARTITION "{name}"')
            await conn.execute(f'DROP TABLE "{name}"')
        return True

    # --- rows ---------------------------------------------------------------------------

    async def id_span(self) -> tuple[int, int] | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.id_span)
        if row is None or row["first"] is None:
            return None
        return int(row["first"]), int(row["last"])

    async def drop_payloads(
        self, first: int, end: int, before: datetime
    ) -> tuple[int, datetime | None]:
        """Payloads of accepted events with ids in [first, end) received before ``before``:
        how many were dropped, and the newest receipt in that id span."""
        async with self._db.transaction() as conn:
            row = await conn.fetchrow(SQL.drop_payloads, first, end, before)
        assert row is not None
        return int(row["dropped"]), row["newest"]

    async def _batch(self, query: str, before: datetime, limit: int) -> int:
        async with self._db.transaction() as conn:
            return int(await conn.fetchval(query, before, limit))

    async def delete_dead_letters(self, before: datetime, limit: int) -> int:
        return await self._batch(SQL.delete_dead_letters, before, limit)

    async def delete_keys(self, before: datetime, limit: int) -> int:
        return await self._batch(SQL.delete_keys, before, limit)

    async def delete_usage(self, before: datetime, limit: int) -> int:
        return await self._batch(SQL.delete_usage, before, limit)

    async def count(self, kind: str, before: datetime) -> int:
        """Rows of ``kind`` (payloads, dead_letters, keys, usage, closed_sessions) past
        ``before``."""
        query = {
            "payloads": SQL.count_payloads,
            "dead_letters": SQL.count_dead_letters,
            "keys": SQL.count_keys,
            "usage": SQL.count_usage,
            "closed_sessions": SQL.count_closed_sessions,
        }[kind]
        async with self._db.connection() as conn:
            return int(await conn.fetchval(query, before))

    # --- closed sessions ----------------------------------------------------------------

    async def closed_sessions(self, before: datetime, limit: int) -> list[int]:
        async with self._db.connection() as conn:
            return [int(r["id"]) for r in await conn.fetch(SQL.closed_sessions, before, limit)]

    async def export_session(self, session_id: int, before: datetime) -> ExportedSession | None:
        """The session and its messages (with their annotations), or None when it is no
        longer a closed session past ``before``."""
        async with self._db.transaction() as conn:
            record = await conn.fetchval(SQL.session_record, session_id, before)
            if record is None:
                return None
            rows = await conn.fetch(SQL.session_messages, session_id)
        messages = [_json(r["message"]) | {"annotations": _json(r["annotations"])} for r in rows]
        return ExportedSession(_json(record), messages)

    async def delete_session(self, session_id: int, before: datetime) -> bool:
        """Delete the session and everything of it: rows that reference it or its messages
        (unlinked instead where the column may be NULL: another session's row), the inbox
        rows its messages came in with, its messages. False when it is no longer a closed
        session past ``before``."""
        async with self._db.transaction() as conn:
            if await conn.fetchval(SQL.session_record, session_id, before) is None:
                return False
            for ref in await conn.fetch(SQL.session_references):
                table, column = _ident(ref["tbl"]), _ident(ref["col"])
                match = (
                    f"{column} IN (SELECT id FROM messages WHERE session_id = $1)"
                    if ref["target"] == "messages"
                    else f"{column} = $1"
                )
                change = (
                    f"UPDATE {table} SET {column} = NULL"
                    if ref["nullable"]
                    else f"DELETE FROM {table}"
                )
                await conn.execute(f"{change} WHERE {match}", session_id)
            await conn.execute(SQL.delete_session_inbox, session_id)
            await conn.execute(SQL.delete_session_messages, session_id)
            await conn.execute(SQL.delete_session, session_id)
        return True


def _ident(name: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError(f"unexpected identifier: {name}")
    return f'"{name}"'
