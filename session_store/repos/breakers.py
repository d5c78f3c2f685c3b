"""Per-model circuit breakers in PostgreSQL, so every replica sees the one state: a model
failing for one replica is passed by on all of them, and one probe request closes it again.
The policy (thresholds, caching, metrics) is the gateway's: ``gateway.agents.breakers``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from session_store.db import Database
from session_store.rows import reader
from session_store.sql import load

SQL = load(__package__, "breakers.sql")


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerRecord:
    model: str
    #: failed requests in a row
    failures: int
    #: open until then (past it: due for a probe); None while closed
    open_until: datetime | None
    opened_at: datetime | None
    last_cause: str | None
    last_error: str | None
    last_error_at: datetime | None
    #: open_until is still ahead
    is_open: bool


_breaker = reader(BreakerRecord)


class Breakers:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def breaker(self, model: str) -> BreakerRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.read_breaker, model)
        return None if row is None else _breaker(row)

    async def breakers(self, *, recent_seconds: float = 3600.0) -> list[BreakerRecord]:
        """Open breakers and models that failed within ``recent_seconds``."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.list_breakers, recent_seconds)
        return [_breaker(r) for r in rows]

    async def record_failure(
        self, model: str, *, cause: str, error: str, threshold: int, open_seconds: float
    ) -> BreakerRecord:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.record_failure, model, cause, threshold, open_seconds, error[:500]
            )
        assert row is not None  # an upsert returns its row
        return _breaker(row)

    async def claim_probe(self, model: str, *, open_seconds: float) -> bool:
        """True for the one caller that probes ``model``'s open breaker now that its time
        is up (the breaker stays open for the others for ``open_seconds`` more)."""
        async with self.db.connection() as conn:
            return await conn.fetchval(SQL.claim_probe, model, open_seconds) is not None

    async def record_success(self, model: str) -> bool:
        """Close ``model``'s breaker; True when it had been open."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.record_success, model)
        return row is not None and row["opened_at"] is not None
