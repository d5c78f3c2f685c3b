"""``python -m benchmarks [--quick] [--json FILE]``: the store hot path against PostgreSQL's own
limit, against the document-blob and checkpointer patterns, and the gateway end to end.

Runs against ``DATABASE_URL`` or a throwaway embedded PostgreSQL (each section in its own
scratch database, dropped afterwards). Every figure is the median of several runs with
min-max; figures that are compared (ours vs pgbench at the same concurrency, ours vs the blob
and the checkpointer at the same length) are measured interleaved within each run, and their
ratio is taken per run, so ratios hold on a noisy shared machine even when absolute numbers
drift. A Markdown report goes to stdout, everything (raw runs included) to ``--json``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import limit as limit_mod
from benchmarks.common import scratch_database, server, summarize, summarize_runs
from benchmarks.e2e import E2E
from benchmarks.hot_path import HotPath, profile_hot_path
from benchmarks.length import LengthBench
from benchmarks.report import markdown
from gateway.core.logs import configure_logging

SECTIONS = ("limit", "hot", "length", "e2e", "kb", "stream", "schedules", "scale")


@dataclass(frozen=True)
class Sizes:
    sessions: int
    per_run: int  # messages (or reads) per measured figure
    read_sessions: int
    pgbench_seconds: float
    concurrency: tuple[int, ...]
    lengths: tuple[int, ...]
    turns: int
    e2e_rates: tuple[float, ...]
    e2e_seconds: float
    e2e_sessions: int
    e2e_concurrency: int
    e2e_max_seconds: float  # the sessions phase stops here even if short of e2e_sessions
    #: seconds each database snapshot of the e2e section waits for the backends' counters
    e2e_stats_settle: float = 1.2


FULL = Sizes(
    sessions=10_000,
    per_run=3_000,
    read_sessions=1_000,
    pgbench_seconds=3,
    concurrency=(1, 4, 16),
    lengths=(10, 100, 1_000, 10_000),
    turns=25,
    e2e_rates=(50, 200),
    e2e_seconds=10,
    e2e_sessions=100_000,
    e2e_concurrency=32,
    e2e_max_seconds=240,
)
QUICK = Sizes(
    sessions=1_000,
    per_run=600,
    read_sessions=200,
    pgbench_seconds=1,
    concurrency=(1, 4, 16),
    lengths=(10, 100, 1_000),
    turns=10,
    e2e_rates=(50, 200),
    e2e_seconds=4,
    e2e_sessions=3_000,
    e2e_concurrency=32,
    e2e_max_seconds=10,
)
# seconds, for the smoke test: proves every section runs, measures nothing
TINY = Sizes(
    sessions=50,
    per_run=60,
    read_sessions=5,
    pgbench_seconds=1,
    concurrency=(2,),
    lengths=(10, 60),
    turns=3,
    e2e_rates=(20,),
    e2e_seconds=1,
    e2e_sessions=20,
    e2e_concurrency=4,
    e2e_max_seconds=10,
    e2e_stats_settle=0.0,  # its database cost figures measure nothing: no wait for counters
)

# ours ÷ pgbench at the same concurrency, per run
RATIO_BASE = {
    "hot": "insert",
    "ingest": "insert",
    "recent50": "recent50",
    "context50": "recent50",
}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"


async def run_limit_and_hot(
    srv: Any, sizes: Sizes, runs: int, sections: set[str], raw: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    limit_runs: dict[str, dict[int, list[dict[str, float]]]] = {}
    hot_runs: dict[str, dict[int, list[dict[str, float]]]] = {}
    async with scratch_database(srv) as limit_dsn, scratch_database(srv) as hot_dsn:
        lim = None
        # the hot path's figures are ratios to pgbench's, measured interleaved: "hot" runs it
        if "limit" in sections or "hot" in sections:
            await limit_mod.prepare(limit_dsn, sizes.sessions, sizes.read_sessions, 60)
            lim = limit_mod.Limit(limit_dsn, sizes.sessions, sizes.pgbench_seconds)
        hp = None
        if "hot" in sections:
            hp = HotPath(hot_dsn, sizes.sessions, sizes.per_run)
            await hp.start(read_sessions=sizes.read_sessions)
        try:
            for run in range(runs):
                for conc in sizes.concurrency:

                    def keep(
                        store: dict[str, dict[int, list[dict[str, float]]]],
                        kind: str,
                        fig: dict[str, float],
                        c: int = conc,
                        r: int = run,
                    ) -> None:
                        store.setdefault(kind, {}).setdefault(c, []).append(fig)
                        print(f"  run {r + 1} {kind}@{c}: {fig['rate']:,.0f}/s", file=sys.stderr)

                    if lim is not None:
                        for kind in ("insert", "ingest_sql"):
                            keep(limit_runs, kind, await lim.measure(kind, conc))
                    if hp is not None:
                        keep(hot_runs, "hot", await hp.ingest(conc, read=True))
                        keep(hot_runs, "ingest", await hp.ingest(conc, read=False))
                    if lim is not None:
                        keep(
                            limit_runs,
                            "recent50",
                            await lim.measure("recent50", conc, sessions=sizes.read_sessions),
                        )
                    if hp is not None:
                        for kind in ("recent50", "context50", "delta"):
                            keep(hot_runs, kind, await hp.read(conc, kind))
        finally:
            if hp is not None:
                await hp.close()
            if lim is not None:
                lim.close()
    raw["limit"] = limit_runs
    raw["hot"] = hot_runs
    limit_out = {
        kind: {c: summarize_runs(rs) for c, rs in by_c.items()} for kind, by_c in limit_runs.items()
    }
    hot_out: dict[str, Any] = {}
    for kind, by_c in hot_runs.items():
        hot_out[kind] = {}
        for c, rs in by_c.items():
            fig: dict[str, Any] = summarize_runs(rs)
            base = limit_runs.get(RATIO_BASE.get(kind, ""), {}).get(c)
            if base:
                fig["ratio"] = summarize(
                    [r["rate"] / b["rate"] for r, b in zip(rs, base, strict=True)]
                )
            hot_out[kind][c] = fig
    return limit_out, hot_out


async def run_length(srv: Any, sizes: Sizes, runs: int, raw: dict[str, Any]) -> dict[str, Any]:
    async with scratch_database(srv) as dsn:
        bench = LengthBench(dsn, sizes.turns)
        await bench.start()
        try:
            patterns = bench.patterns()
            convs = {
                (n, p): await bench.conversation(p, n) for n in sizes.lengths for p in patterns
            }
            per: dict[tuple[int, str], list[dict[str, float]]] = {}
            for run in range(runs):
                for n in sizes.lengths:
                    for p in patterns:
                        fig = await bench.measure(convs[(n, p)])
                        per.setdefault((n, p), []).append(fig)
                        note = f"  run {run + 1} length {n} {p}: {fig['ms']:.2f} ms"
                        print(note, file=sys.stderr)
        finally:
            await bench.close()
    raw["length"] = {f"{n}/{p}": v for (n, p), v in per.items()}
    by_length: dict[int, dict[str, Any]] = {}
    for n in sizes.lengths:
        row: dict[str, Any] = {p: summarize_runs(per[(n, p)]) for p in patterns}
        for p in patterns:
            if p != "ours":
                row[f"{p}_ratio"] = summarize(
                    [
                        theirs["ms"] / ours["ms"]
                        for theirs, ours in zip(per[(n, p)], per[(n, "ours")], strict=True)
                    ]
                )
        by_length[n] = row
    first, last = sizes.lengths[0], sizes.lengths[-1]
    growth = {
        p: by_length[last][p]["ms"]["median"] / by_length[first][p]["ms"]["median"]
        for p in patterns
    }
    return {
        "patterns": patterns,
        "by_length": by_length,
        "growth": growth,
        "skipped": bench.skipped,
        "turns_per_figure": sizes.turns,
    }


async def run_e2e(
    srv: Any,
    sizes: Sizes,
    runs: int,
    raw: dict[str, Any],
    *,
    profile: bool,
    baseline: Path | None = None,
    baseline_first: bool = False,
    surfaces: frozenset[str] | None = None,
) -> dict[str, Any]:
    """This code's e2e phases, and a ``baseline`` checkout's in the same run: after this
    code's, or before them with ``baseline_first`` (two runs in both orders cancel the order
    effect)."""
    first = None
    if baseline is not None and baseline_first:
        first = await _baseline_e2e(srv, sizes, runs, raw, baseline, surfaces)
    out = await _e2e_phases(srv, sizes, runs, migrated=True, profile=profile, surfaces=surfaces)
    raw["e2e"] = out
    result = _e2e_result(out)
    if first is not None:
        result["baseline"] = first
        result["baseline_first"] = True
    elif baseline is not None:
        result["baseline"] = await _baseline_e2e(srv, sizes, runs, raw, baseline, surfaces)
    return result


async def _baseline_e2e(
    srv: Any,
    sizes: Sizes,
    runs: int,
    raw: dict[str, Any],
    baseline: Path,
    surfaces: frozenset[str] | None,
) -> dict[str, Any]:
    # the same phases against another checkout's gateway, in this run (the machine is
    # shared, so old and new are compared within one run). Its own code migrates the
    # database at start.
    base = await _e2e_phases(srv, sizes, runs, migrated=False, repo=baseline, surfaces=surfaces)
    raw["e2e_baseline"] = base
    return {"repo": str(baseline), **_e2e_result(base)}


async def _e2e_phases(
    srv: Any, sizes: Sizes, runs: int, *, migrated: bool, **options: Any
) -> dict[str, Any]:
    """The e2e phases on a scratch database, then 1 replica against 3 on that one database,
    in the same run (``options``: this code's ``profile``, or a baseline's ``repo``)."""
    async with scratch_database(srv, migrated=migrated) as dsn:
        bench = E2E(
            dsn,
            rates=sizes.e2e_rates,
            seconds=sizes.e2e_seconds,
            sessions=sizes.e2e_sessions,
            concurrency=sizes.e2e_concurrency,
            max_seconds=sizes.e2e_max_seconds,
            scale_seconds=min(sizes.e2e_max_seconds, 20.0),
            stats_settle=sizes.e2e_stats_settle,
            **options,
        )
        out = await bench.run(runs)
        out["scale_out"] = await bench.scale_out(runs)
    return out


def _e2e_result(out: dict[str, Any]) -> dict[str, Any]:
    """What the report reads of the phases' raw figures."""
    return {
        "latency": {rate: summarize_runs(rs) for rate, rs in out["latency_runs"].items()},
        "sustained": out["sustained"],
        "scale_out": out["scale_out"],
        "tails": out["tails"],
        "maintenance": out.get("maintenance", {}),
    }


async def kb(srv: Any, args: argparse.Namespace) -> Any:
    from benchmarks.kb import run_kb

    kb_sizes = (
        ((300,), 3, 10)
        if args.tiny
        else ((2_000, 10_000), 10, 100)
        if args.quick
        else ((10_000, 100_000), 30, 300)
    )
    return await run_kb(
        srv,
        sizes=kb_sizes[0],
        pages=kb_sizes[1],
        queries=kb_sizes[2],
        chunks=100 if args.tiny else 1_000,  # embedded to time the local embedder
    )


async def scale(srv: Any, args: argparse.Namespace) -> Any:
    """Does the cost stay flat as the database grows? (``benchmarks/scale.py``)"""
    from benchmarks import scale as sc

    steps = sc.TINY if args.tiny else sc.QUICK if args.quick else sc.FULL
    return await sc.run_scale(srv, steps=steps, iterations=5 if args.tiny else 300)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    sections = set(args.only.split(",")) if args.only else set(SECTIONS)
    unknown = sections - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections: {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    load_at_start = os.getloadavg()[0]
    raw: dict[str, Any] = {}
    results: dict[str, Any] = {}
    async with server(os.environ.get("DATABASE_URL")) as srv:
        if args.profile:
            async with scratch_database(srv) as dsn:
                results["hot_profile"] = await profile_hot_path(dsn)
                print(results["hot_profile"], file=sys.stderr)

        async def limit_and_hot() -> None:
            results["limit"], results["hot"] = await run_limit_and_hot(
                srv, sizes, args.runs, sections, raw
            )

        async def stream() -> Any:  # streaming: time to first visible text
            from benchmarks.stream import run_stream

            return await run_stream(
                srv,
                runs=1 if args.tiny else 3 if args.quick else 7,
                # tiny: the same 25 chunks of the answer, in half a second instead of 1.25
                chunk_delay=0.02 if args.tiny else 0.05,
                chars=200 if args.tiny else 800,
            )

        async def schedules() -> Any:  # N due at once, two replicas, each once
            from benchmarks.schedules import run_schedules

            return await run_schedules(srv, n=200 if args.tiny else 2_000 if args.quick else 10_000)

        runs: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("limit + hot path", limit_and_hot),
            ("length", lambda: run_length(srv, sizes, args.runs, raw)),
            (
                "e2e",
                lambda: run_e2e(
                    srv,
                    sizes,
                    args.runs,
                    raw,
                    profile=args.profile,
                    baseline=args.baseline,
                    baseline_first=args.baseline_first,
                    surfaces=args.surfaces,
                ),
            ),
            ("kb", lambda: kb(srv, args)),
            ("stream", stream),
            ("schedules", schedules),
            ("scale", lambda: scale(srv, args)),
        ]
        for name, run in runs:
            wanted = sections & {"limit", "hot"} if name == "limit + hot path" else name in sections
            if wanted:
                await run_section(name, run, results, save=lambda: save(args.json, results))
        results["meta"] = {
            "quick": args.quick,
            "tiny": args.tiny,
            "runs": args.runs,
            "sizes": asdict(sizes),
            "machine": machine(),
            "server_version": srv.version,
            "server_settings": srv.settings or {},
            "embedded": srv.embedded,
            "sessions": sizes.sessions,
            "seconds": time.perf_counter() - started,
            # other work on the machine skews absolute figures (ratios less so)
            "load_average": [round(load_at_start, 1), round(os.getloadavg()[0], 1)],
            "finished_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
    results["raw"] = raw
    return results


#: what a section needs that the plain install lacks, and how to get it
INSTALL_HINTS = {"fpdf": "pip install fpdf2 (in the test extra: pip install -e '.[test]')"}


async def run_section(
    name: str,
    run: Callable[[], Awaitable[Any]],
    results: dict[str, Any],
    *,
    save: Callable[[], None],
) -> None:
    """One section: its figures under its name (unless it stored them itself), or a line
    saying why it was skipped or failed; the other sections still run, and what has been
    measured so far is written out after each one (``--json``)."""
    print(f"{name} ...", file=sys.stderr)
    try:
        found = await run()
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        hint = INSTALL_HINTS.get(missing, f"pip install {missing}")
        results.setdefault("skipped", {})[name] = f"needs {missing}: {hint}"
        print(f"  skipped: needs {missing} ({hint})", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - one broken section must not lose the report
        results.setdefault("failed", {})[name] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc(file=sys.stderr)
    else:
        if found is not None:
            results[name] = found
    save()


def save(path: Path | None, results: dict[str, Any]) -> None:
    if path is not None:
        path.write_text(json.dumps(results, indent=2, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, under 2 minutes")
    parser.add_argument("--tiny", action="store_true", help="seconds; proves it runs (tests)")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median, min-max)")
    parser.add_argument("--json", type=Path, help="also write every result as JSON here")
    parser.add_argument(
        "--only",
        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)}); "
        "or 'faults' alone: the fault campaign (--minutes, --seed, --platforms); "
        "or 'fuzz' alone: ingress fuzzing (--count, --seed); "
        "or 'routing' alone: tool routing's precision and recall on a labelled set (--seed); "
        "or 'soak' alone: steady load on a real gateway (--minutes, --slack)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile: the store hot path (pyinstrument, to stderr) and the gateway "
        "process during the sustained phase (py-spy, in the report)",
    )
    # the fault campaign runs on its own (three replicas on a PostgreSQL of its own)
    parser.add_argument(
        "--baseline",
        type=Path,
        help="e2e: also run another checkout's gateway (e.g. the main branch) in this run",
    )
    parser.add_argument(
        "--surfaces",
        type=lambda text: frozenset(p.strip() for p in text.split(",") if p.strip()),
        help="e2e: only these platform fakes (comma-separated, e.g. telegram,slack,mattermost; "
        "the web chat and the sink always run): the same mix for this code and a baseline "
        "that lacks some surfaces, whose share would otherwise go to the sink",
    )
    parser.add_argument(
        "--baseline-first",
        action="store_true",
        help="e2e with --baseline: measure the baseline before this code (the other order)",
    )
    parser.add_argument(
        "--minutes", type=float, default=1.0, help="faults: campaign length; soak: its length"
    )
    parser.add_argument(
        "--slack",
        type=float,
        default=1.0,
        help="soak: multiplies the growth bounds (the short CI form is generous)",
    )
    parser.add_argument("--seed", type=int, default=1, help="faults, fuzz: the seed")
    parser.add_argument(
        "--platforms",
        action="store_true",
        help="faults: drive every real surface (campaigns.platforms: the platform fakes, "
        "the web chat, Matrix on a real Synapse) instead of the sink platform",
    )
    parser.add_argument(
        "--count", type=int, default=10_000, help="fuzz: generated events per platform"
    )
    args = parser.parse_args(argv)
    if args.only == "routing":
        from benchmarks import routing

        configure_logging("console", "warning")
        return routing.main(args.seed)
    if args.only == "fuzz":
        from campaigns import fuzz

        configure_logging("console", "warning")
        return fuzz.main(args.count, args.seed)
    if args.only == "soak":
        from benchmarks import soak

        configure_logging("console", "warning")
        return soak.main(args.minutes, slack=args.slack)
    if args.only == "faults":
        from campaigns import faults

        configure_logging("console", "warning")
        return faults.main(args.minutes, args.seed, platforms=args.platforms)
    # the report owns stdout; the store's own logs (migrations applied...) are noise here
    configure_logging("console", "warning")
    try:
        import uvloop
    except ImportError:  # optional (not on Windows)
        results = asyncio.run(main_async(args))
    else:
        results = uvloop.run(main_async(args))
    print(markdown(results))
    save(args.json, results)
    return 1 if results.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
