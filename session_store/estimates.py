"""Counts that stay flat as the tables grow, for the live counts and the metrics scrape.

A set that stays small (pending, sending and failed deliveries, active sessions, dead
letters) is counted exactly through its index. A set that grows with the database (sent
deliveries, closed sessions) is counted exactly up to ``EXACT_UP_TO`` rows, through an index
and with a ``LIMIT``, so the count never reads more than that; past it the number is the
planner's estimate (``EXPLAIN``: the table's size from ``pg_class`` times the value's share
in ``pg_stats``), which costs a plan, not a scan, and is reported as approximate.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

#: a growing set is counted exactly up to this many rows, and estimated past it
EXACT_UP_TO = 10_000


async def planner_rows(conn: asyncpg.Connection, sql: str) -> int:
    """The planner's estimate of the rows ``sql`` (no parameters) returns, without running it."""
    raw: Any = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql)
    plan = json.loads(raw) if isinstance(raw, str) else raw
    return int(plan[0]["Plan"]["Plan Rows"])


async def capped_count(
    conn: asyncpg.Connection, capped_sql: str, estimate_sql: str
) -> tuple[int, bool]:
    """(count, approximate): ``capped_sql`` counts up to its ``$1`` rows; when it reaches
    past ``EXACT_UP_TO`` the count is the estimate of ``estimate_sql``, never below what was
    counted."""
    counted = int(await conn.fetchval(capped_sql, EXACT_UP_TO + 1))
    if counted <= EXACT_UP_TO:
        return counted, False
    return max(counted, await planner_rows(conn, estimate_sql)), True
