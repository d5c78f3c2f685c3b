"""The benchmark says which timed runs PostgreSQL's own maintenance fell into: a vacuum seen
on a real server, and the report's p99 of the runs it left alone."""

from __future__ import annotations

import asyncio

import asyncpg

from benchmarks.maintenance import Maintenance, describe, what_ran
from benchmarks.report import maintenance_table


async def test_a_vacuum_running_while_timed_is_named_and_a_quiet_phase_has_none(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "CREATE TABLE bulky AS SELECT g AS id, repeat(md5(g::text), 8) AS body "
            "FROM generate_series(1, 200000) g"
        )
        async with Maintenance(database_url, every=0.01) as quiet:
            await asyncio.sleep(0.2)
        async with Maintenance(database_url, every=0.01) as busy:
            await conn.execute("VACUUM (FULL, ANALYZE) bulky")
    finally:
        await conn.close()
    assert quiet.summary()["ran"] == []
    assert describe(quiet.summary()) == "none"
    seen = busy.summary()
    assert seen["ran"] == ["VACUUM (FULL, ANALYZE) bulky"]
    assert seen["seconds"] > 0


def test_autovacuums_own_query_reads_as_what_it_did() -> None:
    assert what_ran("autovacuum: VACUUM ANALYZE public.sessions") == "VACUUM ANALYZE sessions"
    assert what_ran("autovacuum: VACUUM public.messages (to prevent wraparound)") == (
        "VACUUM messages"
    )


def test_the_report_gives_the_p99_of_the_runs_maintenance_left_alone() -> None:
    def run(p99: float, ran: list[str], checkpoints: int = 0) -> dict[str, object]:
        return {
            "p99_ms": p99,
            "ran": ran,
            "seconds": 0.6 if ran else 0.0,
            "checkpoints": checkpoints,
        }

    rows = maintenance_table(
        {
            "maintenance": {
                "200.0": [
                    run(250.0, ["VACUUM ANALYZE sessions", "VACUUM ANALYZE messages"]),
                    run(18.0, []),
                    run(90.0, [], checkpoints=1),
                    run(14.0, []),
                    run(22.0, []),
                ]
            }
        }
    )
    assert "| VACUUM ANALYZE sessions, VACUUM ANALYZE messages (0.60 s) |" in rows[2]
    assert rows[4].endswith("| 1 checkpoint(s) |")
    # 14, 18 and 22 ms: the runs with a vacuum or a checkpoint in them are left out
    assert rows[-1] == ("| offered 200 msgs/s: p99 of the 3 run(s) without maintenance | 18.0 | |")
