"""The live counts (``GET /api/v1/stats``, the ``/metrics`` gauges) against real PostgreSQL:
the small sets are exact, a growing set past the exact limit is the planner's estimate and
says so, and no statement reads more rows than the small sets hold plus the limit (with a
limit of 3, on tables holding more)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey
from gateway.core.metrics import Metrics
from gateway.inbound.intake import to_inbound
from session_store import estimates
from session_store.repos.operator import SQL as OPERATOR_SQL
from session_store.repos.operator import OperatorStore
from session_store.repos.outbox import SQL as OUTBOX_SQL
from session_store.store import Store

#: deliveries made by ``_fill``, by status; the small ones no more than the test limit + 1
STATUSES = {"pending": 2, "sending": 2, "failed": 3, "sent": 8}
SESSIONS, CLOSED = 6, 2


def _envelope(thread: str) -> Envelope:
    key = SessionKey(platform="web", scope="local", chat_id="general", thread_id=thread)
    target = ReplyTarget(platform="web", scope="local", chat_id="general", thread_id=thread)
    return Envelope(
        key=key, target=target, message_id=f"{thread}-1", text="hi", sender=Sender(id="u")
    )


async def _fill(store: Store) -> None:
    ids = []
    for n in range(SESSIONS):
        sid = (await store.inbox.ingest(to_inbound(_envelope(f"t{n}")), raw=None)).session_id
        assert sid is not None
        ids.append(sid)
    for sid in ids[:CLOSED]:
        assert await store.sessions.close_session(sid)
    statuses = [status for status, n in STATUSES.items() for _ in range(n)]
    async with store.db.connection() as conn:
        await conn.execute(
            """INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform,
                                       target, content, status)
               SELECT m.id, m.session_id, m.seq_no, p.n, 'web',
                      '{"platform": "web", "scope": "local", "chat_id": "general"}', 'x', p.s
               FROM (SELECT * FROM messages ORDER BY id LIMIT 1) AS m,
                    unnest($1::text[]) WITH ORDINALITY AS p(s, n)""",
            statuses,
        )


async def test_counts_are_exact_below_the_limit(store: Store) -> None:
    await _fill(store)
    counts = await OperatorStore(store).counts()
    assert counts.deliveries == STATUSES
    assert counts.sessions == {"active": SESSIONS - CLOSED, "closed": CLOSED}
    assert counts.approximate == ()
    assert await OperatorStore(store).active_session_count() == SESSIONS - CLOSED
    assert await store.outbox.delivery_counts() == STATUSES


async def test_past_the_limit_the_growing_sets_are_estimates_and_say_so(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(store)
    async with store.db.connection() as conn:
        await conn.execute("ANALYZE sessions; ANALYZE deliveries")
    monkeypatch.setattr(estimates, "EXACT_UP_TO", 3)
    counts = await OperatorStore(store).counts()
    assert counts.approximate == ("sessions.active", "sessions.closed", "deliveries.sent")
    # the small sets stay exact past the limit; the estimates come from the statistics
    assert counts.deliveries == STATUSES
    assert counts.sessions == {"active": SESSIONS - CLOSED, "closed": CLOSED}


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan] if "Relation Name" in plan else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


async def _explain(conn: asyncpg.Connection, sql: str, *args: Any) -> dict[str, Any]:
    raw = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
    return (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]


async def test_every_live_count_statement_reads_only_small_sets_through_an_index(
    store: Store,
) -> None:
    """With sequential scans priced out, a statement no index serves still shows one; and
    counting a whole growing table (sent deliveries, closed sessions) reads more rows than
    the limit of 3 + 1 that every scan here must stay within."""
    await _fill(store)
    cap = (3 + 1,)
    statements = {
        "open_delivery_counts": (OUTBOX_SQL.open_delivery_counts, ()),
        "sent_delivery_count": (OUTBOX_SQL.sent_delivery_count, cap),
        "oldest_pending_age": (OUTBOX_SQL.oldest_pending_age, ()),
        "session_counts": (OPERATOR_SQL.session_counts, cap),
        "active_session_count": (OPERATOR_SQL.active_session_count, cap),
        "inbound_counts": (OPERATOR_SQL.inbound_counts, ()),
    }
    async with store.db.connection() as conn:
        await conn.execute("SET enable_seqscan = off")
        try:
            for name, (sql, args) in statements.items():
                scans = _scans(await _explain(conn, sql, *args))
                assert scans, name
                for scan in scans:
                    assert scan["Node Type"] != "Seq Scan", (name, scan)
                    assert scan["Actual Rows"] <= cap[0], (name, scan)
        finally:
            await conn.execute("RESET enable_seqscan")


def test_the_gauges_help_names_the_exact_limit() -> None:
    """The metrics (in ``gateway.core``, which does not import the store) state the limit."""
    metrics = Metrics()
    for gauge in (metrics.deliveries_by_status, metrics.sessions_active):
        assert f"exact up to {estimates.EXACT_UP_TO}" in gauge._documentation
