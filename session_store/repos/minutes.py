"""Sessions' minutes (see ``minutes.sql`` and ``gateway.turns.minutes``): which closed
sessions are due them, claimed in batches across replicas, and what became of each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from session_store.db import Database
from session_store.rows import reader
from session_store.sql import load
from session_store.values import SessionKey

SQL = load(__package__, "minutes.sql")

MinutesState = Literal["due", "written", "skipped", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DueMinutes:
    """A closed session claimed for its minutes."""

    session_id: int
    key: SessionKey
    #: this claim's try (1 for the first)
    tries: int


@dataclass(frozen=True, slots=True, kw_only=True)
class MinutesRecord:
    """What became of a session's minutes."""

    session_id: int
    state: MinutesState
    tries: int
    kb: str | None
    document_id: int | None
    error: str | None
    updated_at: datetime


_record = reader(MinutesRecord)


class Minutes:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, *, limit: int, lease_seconds: float) -> list[DueMinutes]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.claim_minutes, limit, lease_seconds)
        return [
            DueMinutes(
                session_id=r["session_id"],
                key=SessionKey(
                    platform=r["platform"],
                    scope=r["scope"],
                    chat_id=r["chat_id"],
                    thread_id=r["thread_id"],
                ),
                tries=r["tries"],
            )
            for r in rows
        ]

    async def skip(self, session_ids: Sequence[int]) -> None:
        """Places that keep no minutes: nothing to write, ever."""
        if session_ids:
            async with self._db.connection() as conn:
                await conn.execute(SQL.skip_minutes, list(session_ids))

    async def written(self, session_id: int, *, kb: str, document_id: int) -> None:
        async with self._db.connection() as conn:
            await conn.execute(SQL.minutes_written, session_id, kb, document_id)

    async def failed(
        self, session_id: int, error: str, *, retry_in: float, max_tries: int
    ) -> MinutesState:
        """A failed try: due again after ``retry_in`` seconds, or ``failed`` for good."""
        async with self._db.connection() as conn:
            state = await conn.fetchval(
                SQL.minutes_failed, session_id, error[:2000], retry_in, max_tries
            )
        return "failed" if state == "failed" else "due"

    async def of_session(self, session_id: int) -> MinutesRecord | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.minutes_of_session, session_id)
        return None if row is None else _record(row)

    async def due(self) -> int:
        async with self._db.connection() as conn:
            return int(await conn.fetchval(SQL.due_minutes) or 0)
