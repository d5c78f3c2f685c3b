"""Rolling summaries of a session's transcript: the turn writes one when its context grows
long, an operator or MCP client may write one too."""

from __future__ import annotations

from session_store.db import Database
from session_store.records import SummaryRecord
from session_store.rows import reader
from session_store.sql import load

SQL = load(__package__, "summaries.sql")

_summary = reader(SummaryRecord)


class Summaries:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def latest_summary(self, session_id: int) -> SummaryRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.latest_summary, session_id)
        return None if row is None else _summary(row)

    async def summaries(self, session_id: int) -> list[SummaryRecord]:
        """Oldest first."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.list_summaries, session_id)
        return [_summary(r) for r in rows]

    async def add_summary(
        self,
        session_id: int,
        *,
        from_seq: int,
        to_seq: int,
        content: str,
        model: str | None,
        model_written: bool,
    ) -> SummaryRecord | None:
        """Store a summary of ``from_seq..to_seq``; ``None`` if one reaching as far exists."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.insert_rolling_summary,
                session_id,
                from_seq,
                to_seq,
                content,
                model,
                model_written,
            )
        return None if row is None else _summary(row)
