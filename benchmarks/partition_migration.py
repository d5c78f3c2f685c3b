"""``python -m benchmarks.partition_migration [--rows N] [--messages N]``: how long partitioning
the inbox (migrations 0027-0029) takes on a big inbox, and how long it blocks ingest.

A scratch database (``DATABASE_URL``, or a throwaway embedded PostgreSQL) is migrated up to
0026 and given ``--rows`` inbox rows (10 million by default) spread over the last six months,
made with ``generate_series``. Then 0027, 0028 and 0029 run one at a time while a writer keeps
inserting into ``inbound_events`` (the inbox insert the intake uses, one row every 10 ms): each
step prints its wall time and the writer's longest single insert during it, which is the
longest any ingest waited on a lock the step held. After the migration it checks that no row
was lost and that a redelivery of the oldest stored event is still refused.

``--messages N`` (0: skip) measures the alternative the docs weigh for ``messages``: the time
to copy N message rows into a table hash-partitioned by session (64 partitions) with the same
indexes, which is what partitioning ``messages`` in place would cost at least.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass, field

import asyncpg

from benchmarks.common import scratch_database, server
from session_store.migrator import load_migrations, migrate

_FIRST_NEW = "0027_inbound_keys.sql"

_FILL = """
INSERT INTO inbound_events (platform, event_id, message_key, status, reason, payload,
                            received_at)
OVERRIDING SYSTEM VALUE
SELECT 'bench', 'e' || g, 'chat:' || (g % 5000) || ':' || g,
       CASE WHEN g % 50 = 0 THEN 'rejected' ELSE 'accepted' END,
       NULL,
       jsonb_build_object('update_id', g, 'text', 'a message of ordinary length ' || g),
       now() - interval '180 days' + (g::float8 / $3) * interval '180 days'
FROM generate_series($1::bigint, $2::bigint) AS g
"""

_WRITE = """
INSERT INTO inbound_events (platform, event_id, message_key, status, reason, payload)
VALUES ('probe', $1, NULL, 'rejected', 'probe', '{}'::jsonb)
ON CONFLICT DO NOTHING
"""


@dataclass
class Writer:
    """Inserts one inbox row every ``pause`` seconds; remembers its slowest insert per step."""

    dsn: str
    pause: float = 0.01
    longest: float = 0.0
    writes: int = 0
    errors: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.longest = 0.0

    async def run(self, stopping: asyncio.Event) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            n = 0
            while not stopping.is_set():
                n += 1
                began = time.perf_counter()
                try:
                    await conn.execute(_WRITE, f"probe-{n}")
                    self.writes += 1
                except asyncpg.PostgresError as exc:
                    self.errors.append(str(exc))
                self.longest = max(self.longest, time.perf_counter() - began)
                await asyncio.sleep(self.pause)
        finally:
            await conn.close()


async def fill(dsn: str, rows: int, chunk: int = 1_000_000) -> float:
    began = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        for lo in range(1, rows + 1, chunk):
            await conn.execute(_FILL, lo, min(lo + chunk - 1, rows), float(rows))
        await conn.execute(
            "SELECT setval(pg_get_serial_sequence('inbound_events', 'id'), $1)", rows
        )
        await conn.execute("VACUUM ANALYZE inbound_events")
    finally:
        await conn.close()
    return time.perf_counter() - began


async def migrate_inbox(dsn: str, rows: int) -> dict[str, object]:
    every = load_migrations()
    first = next(i for i, m in enumerate(every) if m.filename == _FIRST_NEW)
    await migrate(dsn, every[:first])
    report: dict[str, object] = {"rows": rows, "fill_seconds": round(await fill(dsn, rows), 1)}
    writer = Writer(dsn)
    stopping = asyncio.Event()
    task = asyncio.create_task(writer.run(stopping))
    await asyncio.sleep(0.5)
    steps = []
    for k in range(first, len(every)):
        if every[k].filename >= "0030":
            break
        writer.reset()
        began = time.perf_counter()
        await migrate(dsn, every[: k + 1])
        wall = time.perf_counter() - began
        await asyncio.sleep(0.1)
        steps.append(
            {
                "migration": every[k].filename,
                "wall_seconds": round(wall, 3),
                "longest_ingest_wait_seconds": round(writer.longest, 3),
            }
        )
    stopping.set()
    await task
    report["steps"] = steps
    report["probe_writes"] = writer.writes
    report["probe_errors"] = writer.errors[:3]
    conn = await asyncpg.connect(dsn)
    try:
        report["rows_after"] = await conn.fetchval(
            "SELECT count(*) FROM inbound_events WHERE platform = 'bench'"
        )
        report["keys_after"] = await conn.fetchval(
            "SELECT count(*) FROM inbound_keys WHERE platform = 'bench'"
        )
        again = await conn.fetchval(
            "INSERT INTO inbound_events (platform, event_id, status) "
            "VALUES ('bench', 'e1', 'accepted') ON CONFLICT DO NOTHING RETURNING id"
        )
        report["oldest_redelivery_deduped"] = again is None
        report["partitions"] = [
            r["name"]
            for r in await conn.fetch(
                "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c "
                "ON c.oid = i.inhrelid WHERE i.inhparent = 'inbound_events'::regclass "
                "ORDER BY 1"
            )
        ]
    finally:
        await conn.close()
    return report


async def rewrite_messages(dsn: str, messages: int, partitions: int = 64) -> dict[str, object]:
    """Copy ``messages`` rows into a hash-partitioned twin of ``messages`` (what partitioning
    it in place costs at least: every row and index entry written again)."""
    sessions = max(messages // 100, 1)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO sessions (platform, scope, chat_id, status) "
            "SELECT 'bench', 'chat', 'c' || g, 'closed' FROM generate_series(1, $1) AS g",
            sessions,
        )
        first = await conn.fetchval("SELECT min(id) FROM sessions WHERE platform = 'bench'")
        began = time.perf_counter()
        await conn.execute(
            "INSERT INTO messages (session_id, seq_no, role, external_id, content) "
            "SELECT $2 + (g % $3), g / $3 + 1, 'user', 'x' || g, "
            "'a message of ordinary length, lorem ipsum dolor sit amet ' || g "
            "FROM generate_series(0, $1 - 1) AS g",
            messages,
            first,
            sessions,
        )
        filled = time.perf_counter() - began
        await conn.execute("VACUUM ANALYZE messages")
        await conn.execute(
            "CREATE TABLE messages_hashed (LIKE messages INCLUDING DEFAULTS) "
            "PARTITION BY HASH (session_id)"
        )
        for i in range(partitions):
            await conn.execute(
                f"CREATE TABLE messages_hashed_{i} PARTITION OF messages_hashed "
                f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
            )
        for ddl in (
            "ALTER TABLE messages_hashed ADD PRIMARY KEY (id, session_id)",
            "CREATE UNIQUE INDEX ON messages_hashed (session_id, seq_no)",
            "CREATE UNIQUE INDEX ON messages_hashed (session_id, external_id) "
            "WHERE external_id IS NOT NULL",
            "CREATE INDEX ON messages_hashed (inbound_event_id) WHERE inbound_event_id IS NOT NULL",
            "CREATE INDEX ON messages_hashed USING gin (to_tsvector('simple', content))",
        ):
            await conn.execute(ddl)
        began = time.perf_counter()
        await conn.execute(
            "INSERT INTO messages_hashed SELECT * FROM messages WHERE session_id >= $1", first
        )
        copied = time.perf_counter() - began
        size = await conn.fetchval("SELECT pg_size_pretty(pg_total_relation_size('messages'))")
    finally:
        await conn.close()
    return {
        "messages": messages,
        "fill_seconds": round(filled, 1),
        "rewrite_seconds": round(copied, 1),
        "rewrite_rows_per_second": round(messages / copied),
        "messages_total_size": size,
        "partitions": partitions,
    }


async def main(rows: int, messages: int) -> dict[str, object]:
    async with server(os.environ.get("DATABASE_URL")) as srv:
        out: dict[str, object] = {"postgres": srv.version}
        if rows:
            async with scratch_database(srv, migrated=False) as dsn:
                out["inbox"] = await migrate_inbox(dsn, rows)
        if messages:
            async with scratch_database(srv) as dsn:
                out["messages"] = await rewrite_messages(dsn, messages)
        return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="inbox rows (0: skip)")
    parser.add_argument("--messages", type=int, default=0, help="messages to rewrite (0: skip)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.rows, args.messages)), indent=2))
