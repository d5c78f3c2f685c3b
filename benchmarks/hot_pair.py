"""``python -m benchmarks.hot_pair CHECKOUT[,CHECKOUT...] [--runs N] [--concurrency 1,16]``:
the store hot path (``Inbox.ingest`` + the 50-message ``Turns.context_page``, section 2 of
``python -m benchmarks``) of several checkouts and pgbench's bare INSERT, interleaved within
each run on one server, so a noisy shared machine moves them alike and the per-run ratios
hold.

Each checkout runs in its own Python process (its own code on ``PYTHONPATH``) on its own
seeded scratch database; the parent asks each in turn for one measured figure. Printed per
figure: msgs/s, p50 and p99, the rate ÷ pgbench's INSERT at that concurrency, and the rate
÷ the last checkout's."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from contextlib import AsyncExitStack
from pathlib import Path

from benchmarks import limit as limit_mod
from benchmarks.common import scratch_database, server

# the child: the checkout's session_store driven by one harness (this checkout's
# hot_path.py unless told otherwise, so only the store differs), one figure per line
_WORKER = """
import asyncio, importlib.util, json, sys

spec = importlib.util.spec_from_file_location("harness_hot_path", sys.argv[4])
harness = importlib.util.module_from_spec(spec)
sys.modules["harness_hot_path"] = harness
spec.loader.exec_module(harness)
HotPath = harness.HotPath

async def main(dsn, sessions, per_run):
    hp = HotPath(dsn, sessions, per_run)
    await hp.start(read_sessions=200)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            kind, conc = line.split()
            if kind == "hot":
                fig = await hp.ingest(int(conc), read=True)
            elif kind == "ingest":
                fig = await hp.ingest(int(conc), read=False)
            else:
                fig = await hp.read(int(conc), kind)
            print(json.dumps(fig), flush=True)
    finally:
        await hp.close()

import uvloop
uvloop.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


class Child:
    def __init__(self, repo: Path, harness: Path) -> None:
        self.repo = repo
        self.harness = harness
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, dsn: str, sessions: int, per_run: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(self.repo)}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WORKER,
            dsn,
            str(sessions),
            str(per_run),
            str(self.harness),
            cwd=self.repo,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"{self.repo}: worker did not start")

    async def measure(self, kind: str, conc: int) -> dict[str, float]:
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{kind} {conc}\n".encode())
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.repo}: worker died")
        result: dict[str, float] = json.loads(line)
        return result

    async def stop(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
            await self.proc.wait()


async def main(
    repos: list[Path],
    runs: int,
    concurrency: list[int],
    kinds: list[str],
    sessions: int,
    per_run: int,
    harness: Path,
) -> None:
    figs: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    async with AsyncExitStack() as stack:
        srv = await stack.enter_async_context(server(os.environ.get("DATABASE_URL")))
        limit_dsn = await stack.enter_async_context(scratch_database(srv))
        await limit_mod.prepare(limit_dsn, sessions, 200, 60)
        lim = limit_mod.Limit(limit_dsn, sessions, 3)
        stack.callback(lim.close)
        children = []
        for repo in repos:
            dsn = await stack.enter_async_context(scratch_database(srv))
            child = Child(repo, harness)
            await child.start(dsn, sessions, per_run)
            stack.push_async_callback(child.stop)
            children.append(child)
        for run in range(runs):
            for conc in concurrency:
                fig = await lim.measure("insert", conc)
                figs.setdefault(("pgbench", "insert", conc), []).append(fig)
                print(
                    f"run {run + 1} pgbench INSERT@{conc}: {fig['rate']:,.0f}/s "
                    f"p50 {fig['p50_ms']:.2f} p99 {fig['p99_ms']:.2f} ms",
                    flush=True,
                )
                # alternate which checkout goes first, so neither always follows pgbench
                order = children if run % 2 == 0 else list(reversed(children))
                for child in order:
                    for kind in kinds:
                        f = await child.measure(kind, conc)
                        figs.setdefault((str(child.repo), kind, conc), []).append(f)
                        base = fig["rate"]
                        print(
                            f"run {run + 1} {child.repo} {kind}@{conc}: {f['rate']:,.0f}/s "
                            f"p50 {f['p50_ms']:.2f} p99 {f['p99_ms']:.2f} ms "
                            f"client CPU {f.get('client_cpu_ms_per_msg', 0):.3f} ms/msg "
                            f"÷ pgbench {f['rate'] / base:.3f}; load {os.getloadavg()[0]:.1f}",
                            flush=True,
                        )
    last = str(repos[-1])
    print()
    for conc in concurrency:
        ins = figs[("pgbench", "insert", conc)]
        print(f"pgbench INSERT @{conc}: " + ", ".join(f"{x['rate']:,.0f}" for x in ins))
        for kind in kinds:
            for repo in repos:
                rs = figs[(str(repo), kind, conc)]
                ratio = [r["rate"] / b["rate"] for r, b in zip(rs, ins, strict=True)]
                vs = [
                    r["rate"] / b["rate"] for r, b in zip(rs, figs[(last, kind, conc)], strict=True)
                ]
                med = statistics.median
                cpu = [r.get("client_cpu_ms_per_msg", 0.0) for r in rs]
                print(
                    f"  {repo} {kind}@{conc}: median {med([r['rate'] for r in rs]):,.0f}/s, "
                    f"p99 {med([r['p99_ms'] for r in rs]):.1f} ms, client CPU "
                    f"{med(cpu):.3f} ms/msg; ÷ pgbench median "
                    f"{med(ratio):.3f} ({min(ratio):.3f}-{max(ratio):.3f}); ÷ last checkout "
                    + ", ".join(f"{v:.2f}" for v in vs)
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("checkouts", help="comma-separated checkouts; ratios are to the last")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", default="16")
    parser.add_argument("--kinds", default="hot", help="hot, ingest, context50, recent50, delta")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--per-run", type=int, default=3_000)
    parser.add_argument(
        "--harness",
        type=Path,
        default=Path(__file__).with_name("hot_path.py"),
        help="the hot_path.py every checkout's store is driven by (default: this checkout's)",
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            [Path(p).resolve() for p in args.checkouts.split(",")],
            args.runs,
            [int(c) for c in args.concurrency.split(",")],
            args.kinds.split(","),
            args.sessions,
            args.per_run,
            args.harness.resolve(),
        )
    )
