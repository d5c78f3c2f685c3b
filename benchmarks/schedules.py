"""``python -m benchmarks --only schedules``: N schedules all due at one instant, fired by two
replicas (two OS processes, each running the gateway's firing loop against one PostgreSQL),
each once. Reports the time until the last one fired, the lateness distribution (a firing's
question stored minus its due time), how the work split between the replicas, and the
each-once check (firings, questions and distinct schedules all equal N).

"Fired" here is what the firing loop does: the firing recorded and the schedule's question
stored in its place's session, asking for a turn; the turn itself then runs on the turn
workers like any message's (their throughput is the ``e2e`` section's)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from benchmarks.common import scratch_database, summarize
from gateway.core.hub import WorkSignal
from gateway.core.plugins import place_target
from gateway.schedules.service import ScheduleService
from gateway.schedules.worker import ScheduleMetrics, ScheduleWorker
from session_store.repos.schedules import Schedules
from session_store.store import Store

#: seconds between creating the schedules and their common due time; the replicas are
#: started and polling by then (each says it is ready before the schedules are made)
LEAD = 1.0


async def _seed(dsn: str, n: int, due: datetime) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            """INSERT INTO schedules (platform, scope, chat_id, thread_id, prompt, owner,
                                      fire_at, next_fire_at)
               SELECT 'sink', 'bench', 'c' || (g % 500), 't' || g, 'digest ' || g, 'bench',
                      $2, $2
               FROM generate_series(1, $1) AS g""",
            n,
            due,
        )
    finally:
        await conn.close()


async def replica(dsn: str, n: int, deadline: float) -> dict[str, Any]:
    """One replica's firing loop, until every schedule has fired (or the deadline)."""
    from prometheus_client import CollectorRegistry

    store = await Store.connect(dsn, min_size=1, max_size=4)
    service = ScheduleService(Schedules(store.db), targets=place_target)
    worker = ScheduleWorker(
        service,
        metrics=ScheduleMetrics(CollectorRegistry()),
        turn_wake=WorkSignal(),
        poll_seconds=0.2,
    )
    fired = 0
    try:
        # ready: the schedules are made once every replica is; then poll until all fired
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        while time.time() < deadline:
            got = await worker.fire_once()
            fired += sum(1 for f in got if f.action == "fire")
            if not got:
                async with store.db.connection() as conn:
                    left = await conn.fetchval(
                        "SELECT count(*) FROM schedules WHERE status = 'active'"
                    )
                if left == 0:
                    break
                await asyncio.sleep(0.2)
    finally:
        await store.close()
    return {"fired": fired}


async def run_schedules(srv: Any, *, n: int, replicas: int = 2) -> dict[str, Any]:
    async with scratch_database(srv) as dsn:
        deadline = time.time() + 180
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "benchmarks.schedules",
                "--replica",
                dsn,
                str(n),
                str(deadline),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            for _ in range(replicas)
        ]
        for p in procs:  # each started (imports, connections): the due instant finds all
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), 120)
            if line.strip() != b"ready":
                raise RuntimeError(f"a replica did not start: {line!r}")
        due = datetime.now(UTC) + timedelta(seconds=LEAD)
        await _seed(dsn, n, due)
        outs = await asyncio.gather(*(p.communicate(b"go\n") for p in procs))
        split = [json.loads(out.decode().strip().splitlines()[-1])["fired"] for out, _ in outs]
        conn = await asyncpg.connect(dsn)
        try:
            lateness = [
                float(r[0])
                for r in await conn.fetch(
                    "SELECT extract(epoch FROM fired_at - due_at) FROM schedule_firings"
                )
            ]
            check = await conn.fetchrow(
                """SELECT (SELECT count(*) FROM schedule_firings) AS firings,
                          (SELECT count(DISTINCT schedule_id) FROM schedule_firings) AS schedules,
                          (SELECT count(*) FROM messages WHERE role = 'system') AS questions,
                          (SELECT count(*) FROM schedules WHERE status = 'done') AS done"""
            )
        finally:
            await conn.close()
    assert check is not None
    return {
        "schedules": n,
        "replicas": replicas,
        "per_replica": split,
        "firings": check["firings"],
        "distinct_schedules": check["schedules"],
        "questions": check["questions"],
        "done": check["done"],
        "each_once": check["firings"] == check["schedules"] == check["questions"] == n,
        "last_fired_after_due_s": round(max(lateness), 3) if lateness else None,
        "lateness_s": summarize(lateness) if lateness else {},
        "lateness_percentiles_s": _percentiles(lateness),
    }


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": round(ordered[-1], 3)}


def schedules_markdown(r: dict[str, Any]) -> list[str]:
    p = r["lateness_percentiles_s"]
    return [
        f"{r['schedules']:,} schedules due at one instant, {r['replicas']} replicas "
        f"(fired {' + '.join(str(x) for x in r['per_replica'])}):",
        "",
        "| firings | distinct schedules | questions | each once | last fired (s after due) "
        "| lateness p50 | p90 | p99 | max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| {r['firings']:,} | {r['distinct_schedules']:,} | {r['questions']:,} | "
        f"{'yes' if r['each_once'] else 'NO'} | {r['last_fired_after_due_s']} | {p.get('p50')} | "
        f"{p.get('p90')} | {p.get('p99')} | {p.get('max')} |",
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replica", nargs=3, metavar=("DSN", "N", "DEADLINE"))
    args = parser.parse_args()
    dsn, n, deadline = args.replica
    result = asyncio.run(replica(dsn, int(n), float(deadline)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
