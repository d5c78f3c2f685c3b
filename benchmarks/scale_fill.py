"""The fill of ``--only scale``: grows one migrated database to a given number of sessions and
messages, server side (``INSERT ... SELECT generate_series``), in steps that add to what the
previous step wrote.

Shapes: sessions on four platforms (Slack and Mattermost ones in threads), ``PER_SESSION``
messages each with a dense ``seq_no``, user and assistant turns alternating, the sessions'
aggregates (last_seq_no, message_count, last_message_at) and their turns answered. Messages
of different sessions interleave in time, as conversations do, so one session's messages lie
on as many heap pages as it has messages. Every user message has its inbox row (platform
event id and message key, for dedupe) and its external id; every assistant message has its
delivery, sent. The text is a handful of ordinary words, plus ``RARE`` in a fixed 20 messages
of the first 10,000 (a word with the same number of hits at every size) and ``SOME`` in one
message in a hundred.

Inbox rows are written through ``inbound_events`` itself, so the fill works whether that
table is partitioned or not. For a large step the secondary indexes of the big tables that
are not partitioned are dropped and built again afterwards from their own definitions (a
bulk load's usual order; much faster than maintaining a GIN index row by row)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any

import asyncpg

PLATFORMS = ("telegram", "slack", "mattermost", "web")
PER_SESSION = 10
#: ms between consecutive messages of the whole database (10M messages span about 22 hours)
SPACING_MS = 8
RARE = "needle"
SOME = "invoice"
WORDS = (
    "reset password export report schedule invite channel upload archive translate summary "
    "calendar budget backup restore deploy review approve refund rename"
).split()
#: rows per INSERT statement (progress and memory stay bounded)
CHUNK = 500_000
#: a step adding at least this many messages drops and rebuilds the big tables' indexes
REBUILD_FROM = 200_000
BIG_TABLES = ("messages", "deliveries", "inbound_events")

_SESSIONS = """
INSERT INTO sessions (id, platform, scope, chat_id, thread_id, title, last_seq_no, message_count,
                      turn_requested_seq, turn_done_seq, answered, created_at, updated_at,
                      last_message_at)
OVERRIDING SYSTEM VALUE
SELECT n, ($6::text[])[n % 4 + 1], 'sc', 'c' || n, CASE WHEN n % 4 IN (1, 2) THEN 't' || n END,
       'question about ' || ($7::text[])[n % cardinality($7::text[]) + 1],
       $3, $3, $3 - 1, $3 - 1, true, $4::timestamptz + first_g * dt, $4::timestamptz + last_g * dt,
       $4::timestamptz + last_g * dt
FROM generate_series($1::bigint + 1, $2::bigint) AS n,
     LATERAL (SELECT $5 + n - $1 AS first_g, $5 + ($3 - 1) * ($2 - $1) + n - $1 AS last_g,
                     make_interval(secs => $8::float8 / 1000.0) AS dt) AS t
"""

# one generated message per row: gg its global number (also its id), s its session, q its seq;
# $1 previous sessions, $2 new sessions in this step, $3 previous messages, $4/$5 the chunk
# (0-based within the step), $6 the time anchor, $7 spacing ms, $8 platforms, $9 words
_GEN = """
WITH gen AS (
    SELECT $3::bigint + g + 1 AS gg, $1::bigint + 1 + g % $2::bigint AS s, g / $2 + 1 AS q
    FROM generate_series($4::bigint, $5::bigint - 1) AS g
), x AS (
    SELECT gg, s, q, q % 2 = 1 AS is_user, ($8::text[])[s % 4 + 1] AS platform,
           CASE WHEN s % 4 IN (1, 2) THEN 't' || s END AS thread,
           $6::timestamptz + gg * make_interval(secs => $7::float8 / 1000.0) AS at,
           ($9::text[])[(gg * 7919) % cardinality($9::text[]) + 1] AS w1,
           ($9::text[])[(gg * 104729 / 7) % cardinality($9::text[]) + 1] AS w2
    FROM gen
)
"""

_MESSAGES = (
    _GEN
    + f"""
INSERT INTO messages (id, session_id, seq_no, inbound_event_id, role, sender_id, sender_name,
                      external_id, content, reply_target, trigger, model, tokens_used, sent_at,
                      created_at)
OVERRIDING SYSTEM VALUE
SELECT gg, s, q, CASE WHEN is_user THEN gg END, CASE WHEN is_user THEN 'user' ELSE 'assistant' END,
       CASE WHEN is_user THEN 'u' || s END, CASE WHEN is_user THEN 'person ' || s END,
       CASE WHEN is_user THEN 'm' || gg END,
       CASE WHEN is_user
            THEN 'how do I ' || w1 || ' the ' || w2 || ' in the gateway'
            ELSE 'you can ' || w1 || ' it from the ' || w2 || ' page of the gateway settings, '
                 || 'then confirm and it is done'
       END
       || CASE WHEN gg % 100 = 0 THEN ' {SOME}' ELSE '' END
       || CASE WHEN gg <= 10000 AND gg % 500 = 0 THEN ' {RARE}' ELSE '' END
       || ' #' || gg,
       CASE WHEN is_user THEN jsonb_build_object(
           'platform', platform, 'scope', 'sc', 'chat_id', 'c' || s, 'thread_id', thread,
           'reply_to_message_id', 'm' || gg, 'extra', '{{}}'::jsonb) END,
       CASE WHEN is_user THEN 'answer' END,
       CASE WHEN NOT is_user THEN 'bench-model' END,
       CASE WHEN NOT is_user THEN 40 + gg % 200 END,
       at, at
FROM x
"""
)

_INBOX = (
    _GEN
    + """
INSERT INTO inbound_events (id, platform, event_id, message_key, status, payload, received_at)
OVERRIDING SYSTEM VALUE
SELECT gg, platform, 'e' || gg, 'sc:c' || s || ':m' || gg, 'accepted',
       jsonb_build_object('update_id', gg, 'chat', s, 'text', 'how do I ' || w1), at
FROM x WHERE is_user
"""
)

_DELIVERIES = (
    _GEN
    + """
INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform, target, content,
                        status, attempts, next_attempt_at, platform_message_id, created_at,
                        sent_at, claimed_at)
SELECT gg, s, q, 0, platform,
       jsonb_build_object('platform', platform, 'scope', 'sc', 'chat_id', 'c' || s,
                          'thread_id', thread, 'reply_to_message_id', 'm' || (gg - 1),
                          'extra', '{}'::jsonb),
       'you can ' || w1 || ' it from the ' || w2 || ' page', 'sent', 1, at, 'p' || gg, at,
       at, at
FROM x WHERE NOT is_user
"""
)


async def _secondary_indexes(conn: asyncpg.Connection) -> list[tuple[str, str]]:
    """(name, definition) of the big tables' indexes that back no constraint, on tables that
    are plain (a partitioned table's indexes are left alone)."""
    rows = await conn.fetch(
        """SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
           FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
           WHERE t.relname = ANY($1) AND t.relkind = 'r'
             AND t.relnamespace = 'public'::regnamespace
             AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)""",
        list(BIG_TABLES),
    )
    return [(r["name"], r["def"]) for r in rows]


async def _bulk_connection(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn)
    await conn.execute("SET synchronous_commit = off")
    await conn.execute("SET maintenance_work_mem = '512MB'")
    await conn.execute("SET work_mem = '64MB'")
    try:
        # generated rows are consistent by construction: skip the per-row foreign key checks
        # (superuser only; without it the fill is just slower)
        await conn.execute("SET session_replication_role = replica")
    except asyncpg.PostgresError:
        pass
    return conn


async def _parallel(
    conns: list[asyncpg.Connection], jobs: list[tuple[str, tuple[Any, ...]]]
) -> None:
    """Run ``jobs`` (statement, args) on the connections, one at a time on each."""
    queue = list(jobs)

    async def worker(conn: asyncpg.Connection) -> None:
        while queue:
            sql, args = queue.pop(0)
            await conn.execute(sql, *args)

    await asyncio.gather(*(worker(c) for c in conns))


async def _settle(conns: list[asyncpg.Connection], reserve: int) -> None:
    """After a fill: sequences past ``reserve``, VACUUM ANALYZE, a checkpoint."""
    main = conns[0]
    for table in ("sessions", "messages", "inbound_events"):
        await main.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
            f"greatest($1, (SELECT max(id) FROM {table})))",
            reserve,
        )
    tables = ("messages", "deliveries", "inbound_events", "sessions")
    await _parallel(conns, [(f"VACUUM (ANALYZE) {t}", ()) for t in tables])
    try:
        # the fill's dirty pages are written now, not during the measurements
        await main.execute("CHECKPOINT")
    except asyncpg.PostgresError:
        pass  # not allowed to this role: the first measurements share the disk with it


async def grow(
    dsn: str,
    *,
    sessions: tuple[int, int],
    messages_before: int,
    anchor: datetime,
    reserve: int,
    workers: int = 2,
) -> dict[str, float]:
    """Add sessions ``sessions[0]+1 .. sessions[1]`` with ``PER_SESSION`` messages each (and
    their inbox rows and deliveries); then VACUUM ANALYZE. Ids the gateway's own writes take
    afterwards start above ``reserve`` (the largest id a later step fills), so that later
    steps' rows keep their numbers. Returns the seconds each phase took."""
    s0, s1 = sessions
    added = (s1 - s0) * PER_SESSION
    conns = [await _bulk_connection(dsn) for _ in range(workers)]
    out: dict[str, float] = {}
    try:
        main = conns[0]
        dropped: list[tuple[str, str]] = []
        if added >= REBUILD_FROM:
            dropped = await _secondary_indexes(main)
            for name, _ in dropped:
                await main.execute(f"DROP INDEX {name}")
        started = time.perf_counter()
        await main.execute(
            _SESSIONS,
            s0,
            s1,
            PER_SESSION,
            anchor,
            messages_before,
            list(PLATFORMS),
            list(WORDS),
            float(SPACING_MS),
        )
        chunks = [
            (
                s0,
                s1 - s0,
                messages_before,
                lo,
                min(added, lo + CHUNK),
                anchor,
                float(SPACING_MS),
                list(PLATFORMS),
                list(WORDS),
            )
            for lo in range(0, added, CHUNK)
        ]
        # messages first: the inbox rows and deliveries refer to them
        await _parallel(conns, [(_MESSAGES, args) for args in chunks])
        await _parallel(conns, [(q, args) for args in chunks for q in (_INBOX, _DELIVERIES)])
        out["insert_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await _parallel(conns, [(d, ()) for _, d in dropped])
        out["index_s"] = time.perf_counter() - started
        started = time.perf_counter()
        await _settle(conns, reserve)
        out["vacuum_analyze_s"] = time.perf_counter() - started
    finally:
        for c in conns:
            await c.close()
    out["fill_s"] = out["insert_s"] + out["index_s"] + out["vacuum_analyze_s"]
    return out
