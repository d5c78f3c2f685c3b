"""Section 2, the store hot path through the project's own API: ``Inbox.ingest`` (inbox dedupe
+ session get-or-create + append with seq_no) then the 50-message context window a turn reads
(``Turns.context_page``), over many sessions with 1% duplicate deliveries; ingest alone; and
the recent-50 and delta-poll reads alone.

Every session starts with 50 messages, so the recent-50 read returns a full window as it would
in a conversation under way."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from benchmarks.common import TEXT, closed_loop, inbound, latency_figures, raw_payload, wal_lsn
from session_store.store import Store

PLATFORM = "bench"
READ_PLATFORM = "bench-read"
SEED_LEN = 50
READ_LEN = 60
_TARGET = '{"platform":"bench","scope":"s","chat_id":"c","thread_id":"t","reply_to_message_id":"m"}'


async def seed(dsn: str, *, platform: str, sessions: int, length: int) -> list[int]:
    """``sessions`` sessions keyed like ``common.envelope`` with ``length`` messages each;
    returns their ids (bulk SQL: seeding is not what is measured)."""
    conn = await asyncpg.connect(dsn)
    try:
        ids = await conn.fetch(
            """
            INSERT INTO sessions (platform, scope, chat_id, thread_id, last_seq_no,
                                  message_count, last_message_at)
            SELECT $1, 's', 'c' || g, 't', $3, $3, now() FROM generate_series(0, $2 - 1) g
            RETURNING id
            """,
            platform,
            sessions,
            length,
        )
        await conn.execute(
            f"""
            INSERT INTO messages (session_id, seq_no, role, sender_id, sender_name, content,
                                  reply_target, trigger, external_id)
            SELECT s.id, n, CASE WHEN n % 2 = 0 THEN 'assistant' ELSE 'user' END, 'u',
                   'bench', $1 || ' #' || n, '{_TARGET}'::jsonb, 'context', 'seed' || n
            FROM sessions s, generate_series(1, $2) n
            WHERE s.platform = $3
            """,
            TEXT,
            length,
            platform,
        )
        await conn.execute("VACUUM ANALYZE")
        return [r["id"] for r in ids]
    finally:
        await conn.close()


@dataclass
class HotPath:
    dsn: str
    sessions: int
    per_run: int
    read_ids: list[int] = field(default_factory=list)
    store: Store | None = None
    _lsn_conn: asyncpg.Connection | None = None
    _n: int = 0
    _rng: random.Random = field(default_factory=lambda: random.Random(8))

    async def start(self, *, read_sessions: int) -> None:
        await seed(self.dsn, platform=PLATFORM, sessions=self.sessions, length=SEED_LEN)
        self.read_ids = await seed(
            self.dsn, platform=READ_PLATFORM, sessions=read_sessions, length=READ_LEN
        )
        self.store = await Store.connect(self.dsn, min_size=24, max_size=24)
        self._lsn_conn = await asyncpg.connect(self.dsn)

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()
        if self._lsn_conn is not None:
            await self._lsn_conn.close()

    async def ingest(self, concurrency: int, *, read: bool) -> dict[str, float]:
        """msgs/s, p50/p99 per message, WAL bytes per stored message; 1% duplicates."""
        assert self.store is not None and self._lsn_conn is not None
        store = self.store
        base = self._n
        self._n += self.per_run
        sessions = [self._rng.randrange(self.sessions) for _ in range(self.per_run)]
        # the inbound items are built before the clock starts: the store is measured, not the
        # intake's payload cleaning (pgbench's side has none either)
        items = [
            (inbound(sessions[j], base + j), raw_payload(sessions[j], base + j))
            for j in range(self.per_run)
        ]
        done: list[int] = []  # ops whose message is stored: candidates for a redelivery
        counts = {"accepted": 0, "duplicate": 0, "expected_dups": 0}

        async def op(i: int) -> None:
            if i % 100 == 99 and done:
                j = done[-1]  # a platform redelivering an event we already acknowledged
                counts["expected_dups"] += 1
            else:
                j = i
            item, raw = items[j]
            result = await store.inbox.ingest(item, raw=raw)
            counts[result.status] = counts.get(result.status, 0) + 1
            if result.status == "accepted":
                done.append(j)
                if read:
                    # the context window a turn reads (what the agent gets)
                    assert result.session_id is not None and result.seq_no is not None
                    page = await store.turns.context_page(
                        result.session_id, after_seq=0, upto_seq=result.seq_no, limit=50
                    )
                    # the context holds the message committed just before it
                    if not page or page[0].seq_no != result.seq_no:
                        raise AssertionError(f"context of {result.seq_no} misses it")

        before = await wal_lsn(self._lsn_conn)
        cpu = time.process_time()
        rate, lat = await closed_loop(concurrency, self.per_run, op)
        cpu = time.process_time() - cpu
        wal = await wal_lsn(self._lsn_conn) - before
        if (
            counts["duplicate"] != counts["expected_dups"]
            or counts["accepted"] + counts["duplicate"] != self.per_run
        ):
            raise AssertionError(f"dedupe mismatch: {counts}")
        out = latency_figures(rate, lat)
        out["wal_bytes_per_msg"] = wal / max(1, counts["accepted"])
        # the client's own CPU (this process, one Python thread): less moved by a busy machine
        # than the rate, which shares the cores with PostgreSQL
        out["client_cpu_ms_per_msg"] = cpu * 1000 / self.per_run
        return out

    async def read(self, concurrency: int, kind: str) -> dict[str, float]:
        """``recent50``: Sessions.recent (full records); ``context50``: the context window a
        turn reads (Turns.context_page); ``delta``: a turn's poll for what is new."""
        assert self.store is not None
        store, ids = self.store, self.read_ids
        picks = [self._rng.choice(ids) for _ in range(self.per_run)]

        async def op(i: int) -> None:
            rows: list[Any]
            if kind == "delta":
                # what arrived since the session was last answered: a couple of rows
                rows = await store.sessions.delta(picks[i], READ_LEN - 2, 1000)
                assert len(rows) == 2
            elif kind == "context50":
                rows = await store.turns.context_page(
                    picks[i], after_seq=0, upto_seq=READ_LEN, limit=50
                )
                assert len(rows) == 50
            else:
                rows = await store.sessions.recent(picks[i], 50)
                assert len(rows) == 50

        rate, lat = await closed_loop(concurrency, self.per_run, op)
        return latency_figures(rate, lat)


async def profile_hot_path(dsn: str, seconds: float = 10.0) -> str:
    """A pyinstrument profile of the hot path at 16 (text), when installed."""
    try:
        from pyinstrument import Profiler
    except ImportError:
        return "pyinstrument not installed (pip install pyinstrument)"
    hp = HotPath(dsn, sessions=2_000, per_run=1_000)
    await hp.start(read_sessions=10)
    try:
        profiler = Profiler(async_mode="disabled")
        profiler.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await hp.ingest(16, read=True)
        profiler.stop()
        text: Any = profiler.output_text(unicode=False, color=False, show_all=False)
        return str(text)
    finally:
        await hp.close()
