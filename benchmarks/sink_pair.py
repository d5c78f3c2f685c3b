"""``python -m benchmarks.sink_pair CHECKOUT[,CHECKOUT...] [--runs N] [--sessions N]``: gateway
CPU and database transactions per message on the sink surface alone (1 replica, echo agent),
the checkouts' gateways alternating within each run (each on a database of its own, migrated
by its own gateway), so a noisy shared machine moves all of them alike and the per-run ratio
to the last checkout holds.

Each gateway gets a 200-session warm-up, then a closed loop of 32 conversations over
``--sessions`` new sessions; ``PROF=path`` also records py-spy's raw stacks of each
checkout's first run to ``path.<index>``."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from benchmarks import e2e
from benchmarks.common import db_snapshot, scratch_database, server


async def _one(
    dsn: str, repo: Path, sessions: int, phase: int, prof: Path | None
) -> dict[str, Any]:
    async with e2e.sink_only(dsn, repo, first_token=phase * 10_000_000, prefix=f"p{phase}-") as (
        proc,
        driver,
        _,
    ):
        await e2e.sustained(driver, proc.pid, sessions=200, concurrency=32, max_seconds=30)
        before = await db_snapshot(dsn)
        spy = await e2e.py_spy(proc.pid, 15, prof) if prof is not None else None
        load = await e2e.sustained(
            driver, proc.pid, sessions=sessions, concurrency=32, max_seconds=120
        )
        load.update(e2e.database_cost(before, await db_snapshot(dsn), load["sessions"], None))
        if spy is not None:
            await spy.wait()
        return load


async def main(repos: list[Path], runs: int, sessions: int) -> None:
    prof = os.environ.get("PROF")
    results: dict[Path, list[dict[str, Any]]] = {r: [] for r in repos}
    phase = 0
    async with server(os.environ.get("DATABASE_URL")) as srv, AsyncExitStack() as stack:
        # a database per checkout, migrated by its own gateway: a newer checkout's migrations
        # would stop an older one
        dsns = [
            await stack.enter_async_context(scratch_database(srv, migrated=False)) for _ in repos
        ]
        for i in range(runs):
            for j, repo in enumerate(repos):
                phase += 1
                spy = Path(f"{prof}.{j}") if prof and i == 0 else None
                load = await _one(dsns[j], repo, sessions, phase, spy)
                results[repo].append(load)
                print(
                    f"{repo}: {load['gateway_cpu_ms_per_msg']:.3f} ms CPU, "
                    f"{load['db_transactions_per_msg']:.2f} transactions, "
                    f"{load['rate']:.0f} msgs/s; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    last = results[repos[-1]]
    for repo, loads in results.items():
        cpu = [x["gateway_cpu_ms_per_msg"] for x in loads]
        ratios = [
            x["gateway_cpu_ms_per_msg"] / b["gateway_cpu_ms_per_msg"]
            for x, b in zip(loads, last, strict=True)
        ]
        print(
            f"{repo}: CPU per message median {statistics.median(cpu):.2f} ms "
            f"({min(cpu):.2f}-{max(cpu):.2f}); ÷ {repos[-1]} per run: "
            + ", ".join(f"{r:.2f}" for r in ratios)
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", help="comma-separated checkouts; ratios are to the last")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=1500)
    args = parser.parse_args()
    paths = [Path(p).resolve() for p in args.checkouts.split(",")]
    asyncio.run(main(paths, args.runs, args.sessions))
