"""What PostgreSQL's own maintenance did while a phase was timed: vacuums and analyzes of
this database (autovacuum's workers, or anyone's ``VACUUM``/``ANALYZE``), sampled from
``pg_stat_activity``, and the checkpoints completed (the checkpointer's counters).

On the benchmark's two cores the gateway, PostgreSQL and the load generator already share
the machine at 200 msgs/s offered; an autovacuum round (once a minute, and every table of a
young, fast-growing database is due each time) takes most of a core for about half a second,
and every message in flight waits for CPU. The p99 of a run that such a round fell into is
that round's, not the gateway's, and the report says which runs those were."""

from __future__ import annotations

import asyncio
import time
from contextlib import suppress
from types import TracebackType
from typing import Any

import asyncpg

#: this database's vacuums and analyzes running now: autovacuum's own (whose query reads
#: ``autovacuum: VACUUM ANALYZE public.sessions``) and anyone else's
_RUNNING = """
SELECT query FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
  AND (backend_type = 'autovacuum worker' OR query ~* '^\\s*(vacuum|analyze)\\y')
"""


class Maintenance:
    """``async with Maintenance(dsn) as m: ...`` then ``m.summary()``: the vacuums and
    analyzes seen (each once, in the order they began), the seconds during which at least
    one was running (to the sampling interval), and the checkpoints completed meanwhile."""

    def __init__(self, dsn: str, *, every: float = 0.05) -> None:
        self._dsn = dsn
        self._every = every
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._seen: dict[str, None] = {}
        self._busy = 0
        self._samples = 0
        self._checkpoints: tuple[int | None, int | None] = (None, None)
        self._started = 0.0
        self._seconds = 0.0

    async def __aenter__(self) -> Maintenance:
        self._conn = await asyncpg.connect(self._dsn)
        self._checkpoints = (await checkpoints_done(self._conn), None)
        self._started = time.perf_counter()
        self._task = asyncio.create_task(self._sample(), name="bench-maintenance")
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None and self._conn is not None
        self._task.cancel()
        with suppress(asyncio.CancelledError):
            await self._task
        self._seconds = time.perf_counter() - self._started
        try:
            self._checkpoints = (self._checkpoints[0], await checkpoints_done(self._conn))
        finally:
            await self._conn.close()

    async def _sample(self) -> None:
        assert self._conn is not None
        while True:
            try:
                rows = await self._conn.fetch(_RUNNING)
            except asyncpg.PostgresError:
                rows = []
            self.record([r["query"] for r in rows])
            await asyncio.sleep(self._every)

    def record(self, running: list[str]) -> None:
        """One sample: the queries of the maintenance running at that moment."""
        self._samples += 1
        if running:
            self._busy += 1
        for query in running:
            self._seen.setdefault(what_ran(query), None)

    def summary(self) -> dict[str, Any]:
        before, after = self._checkpoints
        share = self._busy / self._samples if self._samples else 0.0
        return {
            "ran": list(self._seen),
            "seconds": round(share * self._seconds, 2),
            "checkpoints": None if before is None or after is None else after - before,
        }


def what_ran(query: str) -> str:
    """``autovacuum: VACUUM ANALYZE public.sessions`` -> ``VACUUM ANALYZE sessions``."""
    text = query.strip().removeprefix("autovacuum:").strip()
    text = text.removesuffix("(to prevent wraparound)").strip().rstrip(";")
    words = text.split()
    return " ".join(w.removeprefix("public.") for w in words)


async def checkpoints_done(conn: asyncpg.Connection) -> int | None:
    """Checkpoints completed since the statistics were reset: ``pg_stat_checkpointer`` from
    PostgreSQL 17 on (``num_done``, not ``num_timed``, which counts skipped ones too),
    ``pg_stat_bgwriter`` before."""
    for query in (
        "SELECT num_done FROM pg_stat_checkpointer",
        "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
    ):
        try:
            return int(await conn.fetchval(query))
        except asyncpg.PostgresError:
            continue
    return None


def describe(summary: dict[str, Any] | None) -> str:
    """A run's maintenance for the report: ``none`` or what ran, for how long."""
    if not summary:
        return "not sampled"
    parts = []
    if summary["ran"]:
        parts.append(f"{', '.join(summary['ran'])} ({summary['seconds']:.2f} s)")
    if summary.get("checkpoints"):
        parts.append(f"{summary['checkpoints']} checkpoint(s)")
    return "; ".join(parts) or "none"
