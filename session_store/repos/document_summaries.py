"""Documents' summaries (see ``document_summaries.sql`` and ``gateway.knowledge.summaries``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from session_store.db import Database
from session_store.sql import load

SQL = load(__package__, "document_summaries.sql")


@dataclass(frozen=True, slots=True, kw_only=True)
class DueSummary:
    """A document claimed for its summary."""

    id: int
    name: str
    kb_name: str
    #: where the file was shared (a ``ReplyTarget`` as JSON), for a thread's own files
    notify_target: Mapping[str, Any] | None
    #: this claim's try (1 for the first)
    tries: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryState:
    summary: str | None
    model: str | None
    tries: int
    error: str | None


class DocumentSummaries:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(self, *, lease_seconds: float) -> DueSummary | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.claim_summary, lease_seconds)
        if row is None:
            return None
        target = row["notify_target"]
        if isinstance(target, str):
            target = json.loads(target)
        return DueSummary(
            id=row["id"],
            name=row["name"],
            kb_name=row["kb_name"],
            notify_target=target if isinstance(target, Mapping) else None,
            tries=row["tries"],
        )

    async def save(self, document_id: int, text: str, model: str) -> bool:
        """Store the summary; ``False`` when one was stored already (or the document went)."""
        async with self._db.connection() as conn:
            return await conn.fetchval(SQL.save_summary, document_id, text, model) is not None

    async def fail(self, document_id: int, error: str, *, retry_in: float) -> None:
        async with self._db.connection() as conn:
            await conn.execute(SQL.fail_summary, document_id, error[:500], retry_in)

    async def of(self, document_ids: Sequence[int]) -> dict[int, str]:
        """The stored summaries of these documents (those that have one)."""
        if not document_ids:
            return {}
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.summaries_of, list(document_ids))
        return {r["id"]: r["summary"] for r in rows}

    async def state(self, document_id: int) -> SummaryState | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.summary_state, document_id)
        if row is None:
            return None
        return SummaryState(
            summary=row["summary"],
            model=row["summary_model"],
            tries=row["summary_tries"],
            error=row["summary_error"],
        )
