"""The Markdown report: one table per section, then the targets with how far each is."""

from __future__ import annotations

import os
from typing import Any

Stat = dict[str, float]


def _f(stat: Stat | None, digits: int = 0) -> str:
    if stat is None:
        return "-"
    m, lo, hi = stat["median"], stat["min"], stat["max"]
    if lo == hi:
        return f"{m:,.{digits}f}"
    return f"{m:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def _v(stat: Stat | None, digits: int = 2) -> str:
    return "-" if stat is None else f"{stat['median']:,.{digits}f}"


HOT_ROWS = [
    ("pgbench: INSERT one message row", "limit", "insert"),
    ("pgbench: our ingest statement (inbox + session + message)", "limit", "ingest_sql"),
    ("store: ingest + context-50 read (the hot path)", "hot", "hot"),
    ("store: ingest alone", "hot", "ingest"),
    ("pgbench: last-50 SELECT", "limit", "recent50"),
    ("store: recent-50 read alone (full records)", "hot", "recent50"),
    ("store: context-50 read alone (what a turn reads)", "hot", "context50"),
    ("store: delta-poll read alone", "hot", "delta"),
]


def hot_table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| operation | concurrency | ops/s median (min-max) | p50 ms | p99 ms | WAL bytes/msg "
        "| ÷ pgbench, same concurrency |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, section, kind in HOT_ROWS:
        figures = results.get(section, {}).get(kind, {})
        for conc, stat in figures.items():
            ratio = stat.get("ratio")
            lines.append(
                f"| {label} | {conc} | {_f(stat['rate'])} | {_v(stat['p50_ms'])} "
                f"| {_v(stat['p99_ms'])} | {_v(stat.get('wal_bytes_per_msg'), 0)} "
                f"| {_f(ratio, 2) if ratio else ''} |"
            )
    return lines


def length_table(results: dict[str, Any]) -> list[str]:
    length = results.get("length")
    if not length:
        return []
    patterns = length["patterns"]
    head = " | ".join(f"{p} ms/msg" for p in patterns)
    ratios = [p for p in patterns if p != "ours"]
    lines = [
        f"| messages in session | {head} | "
        + " | ".join(f"{p} ÷ ours" for p in ratios)
        + " | WAL bytes/msg ("
        + " / ".join(patterns)
        + ") |",
        "|---" * (2 + len(patterns) + len(ratios)) + "|",
    ]
    for n, row in length["by_length"].items():
        cells = [_f(row[p]["ms"], 2) for p in patterns]
        cells += [_f(row.get(f"{p}_ratio"), 1) for p in ratios]
        wal = " / ".join(_v(row[p]["wal_bytes_per_msg"], 0) for p in patterns)
        lines.append(f"| {n:,} | " + " | ".join(cells) + f" | {wal} |")
    growth = ", ".join(f"{p} x{length['growth'][p]:.1f}" for p in patterns if p in length["growth"])
    lines.append("")
    lines.append(f"Per-message cost at the longest length ÷ at the shortest: {growth}.")
    for pattern, why in length.get("skipped", {}).items():
        lines.append(f"{pattern} skipped: {why}.")
    return lines


def _opt(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def per_message_table(results: dict[str, Any]) -> list[str]:
    """The first-class figures: what one message costs the gateway and PostgreSQL
    (the sustained phase), and what that means for a bigger database server."""
    e2e = results.get("e2e")
    if not e2e:
        return []
    load = e2e["sustained"]
    rows = [
        "| per message (sustained phase) | value |",
        "|---|---|",
        f"| **database transactions per message** | **{load['db_transactions_per_msg']:.2f}** |",
        f"| ... by kind | {_kinds(load.get('db_transactions_by_kind'))} |",
        f"| **gateway CPU per message** | **{load['gateway_cpu_ms_per_msg']:.2f} ms** |",
        f"| PostgreSQL CPU per message (all its processes) "
        f"| {_opt(load.get('db_cpu_ms_per_msg'), 2, ' ms')} |",
        f"| PostgreSQL statement time per message (pg_stat_statements) "
        f"| {_opt(load.get('db_exec_ms_per_msg'), 2, ' ms')} |",
        f"| WAL bytes per message | {_opt(load.get('db_wal_bytes_per_msg'), 0)} |",
        f"| load generator CPU per message (the benchmark's own process: fakes, receiver, "
        f"clients; Synapse not counted) "
        f"| {_opt(load.get('load_generator_cpu_ms_per_msg'), 2, ' ms')} |",
    ]
    pg_cpu = load.get("db_cpu_ms_per_msg")
    own = load.get("load_generator_cpu_ms_per_msg")
    if pg_cpu and own:
        # what the machine could serve were the gateway free: its cores over the rest's cost
        cores = os.cpu_count() or 1
        rows.append(
            f"| ceiling of this machine's {cores} cores with a gateway that cost nothing "
            f"(PostgreSQL and the load generator alone) | {cores * 1000 / (pg_cpu + own):,.0f}"
            " msgs/s |"
        )
    if pg_cpu:
        # PostgreSQL's CPU per message bounds a dedicated server: cores / cost
        for cores in (2, 16, 64):
            rows.append(
                f"| ceiling of a dedicated {cores}-core database server at this cost "
                f"(CPU-bound, no gateway on it) | {cores * 1000 / pg_cpu:,.0f} msgs/s |"
            )
    stmts = load.get("db_statements") or []
    if stmts:
        rows += [
            "",
            "| statement (pg_stat_statements, sustained phase) | calls/msg | ms/msg "
            "| rows/call | WAL bytes/msg |",
            "|---|---|---|---|---|",
        ]
        rows += [
            f"| `{st['query'][:90]}` | {st['calls_per_msg']:.2f} | {st['ms_per_msg']:.3f} "
            f"| {st['rows_per_call']:.1f} | {st['wal_bytes_per_msg']:,.0f} |"
            for st in stmts
        ]
    base = e2e.get("baseline")
    if base:
        b = base["sustained"]
        rows += [
            "",
            f"| same run, same phases | this code | baseline ({base['repo']}) | ÷ baseline |",
            "|---|---|---|---|",
        ]
        pairs = [
            ("database transactions per message", "db_transactions_per_msg", 2),
            ("gateway CPU per message, ms", "gateway_cpu_ms_per_msg", 2),
            ("PostgreSQL CPU per message, ms", "db_cpu_ms_per_msg", 2),
            ("WAL bytes per message", "db_wal_bytes_per_msg", 0),
            ("sustained msgs/s", "rate", 0),
            ("sustained p50 ms", "p50_ms", 1),
        ]
        for label, key, digits in pairs:
            ours, theirs = load.get(key), b.get(key)
            ratio = f"{ours / theirs:.2f}" if ours is not None and theirs else "-"
            rows.append(f"| {label} | {_opt(ours, digits)} | {_opt(theirs, digits)} | {ratio} |")
            if key == "db_transactions_per_msg":
                mine, other = load.get("db_transactions_by_kind"), b.get("db_transactions_by_kind")
                for kind in mine or other or {}:
                    o = (mine or {}).get(kind)
                    t = (other or {}).get(kind)
                    r = f"{o / t:.2f}" if o is not None and t else "-"
                    rows.append(f"| ... {kind} | {_opt(o, 2)} | {_opt(t, 2)} | {r} |")
        for rate, lat in e2e["latency"].items():
            blat = base["latency"].get(rate)
            if blat is None:
                continue
            for q in ("p50_ms", "p99_ms", "p99_local_ms"):
                if q not in lat or q not in blat:
                    continue
                ours, theirs = lat[q]["median"], blat[q]["median"]
                name = "p99 ms without Matrix" if q == "p99_local_ms" else f"{q[:3]} ms"
                rows.append(
                    f"| offered {float(rate):.0f} msgs/s, {name} | {ours:,.1f} "
                    f"| {theirs:,.1f} | {ours / theirs:.2f} |"
                )
    tail = tail_table(e2e)
    if tail:
        rows += ["", *tail]
    upkeep = maintenance_table(e2e)
    if upkeep:
        rows += ["", *upkeep]
    for whose, scale in (
        ("", e2e.get("scale_out")),
        (" (baseline)", (base or {}).get("scale_out")),
    ):
        if not scale:
            continue
        rows += [
            "",
            f"| replicas on one database{whose} (sink, closed loop) | msgs/s | per replica "
            "| p50 ms | gateway CPU/msg (all replicas) | transactions/msg | by kind "
            "| PostgreSQL CPU/msg | ÷ 1 replica, same run |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for n, figs in scale["runs"].items():
            scale_ratio = _stat(scale["ratio"][int(n) if int(n) in scale["ratio"] else n])
            kinds = figs[len(figs) // 2].get("db_transactions_by_kind")
            rows.append(
                f"| {n} | {_f(_stat([f['rate'] for f in figs]))} "
                f"| {_f(_stat([f['rate'] / int(n) for f in figs]))} "
                f"| {_f(_stat([f['p50_ms'] for f in figs]), 1)} "
                f"| {_f(_stat([f['gateway_cpu_ms_per_msg'] for f in figs]), 2)} ms "
                f"| {_f(_stat([f['db_transactions_per_msg'] for f in figs]), 2)} "
                f"| {_kinds(kinds)} "
                f"| {_opt(_median([f.get('db_cpu_ms_per_msg') for f in figs]), 2, ' ms')} "
                f"| {_f(scale_ratio, 2)} |"
            )
    return rows


def tail_table(e2e: dict[str, Any]) -> list[str]:
    """Where the time of the slowest 1% of sink messages goes at each offered rate, against
    the median message (``benchmarks.e2e.tail_breakdown``; the last run's figures)."""
    from benchmarks.e2e import TAIL_STAGES

    rows: list[str] = []
    theirs = (e2e.get("baseline") or {}).get("tails")
    for whose, tails in (("", e2e.get("tails")), (" (baseline)", theirs)):
        for rate, runs in (tails or {}).items():
            found = [t for t in runs if t]
            if not found:
                continue
            t = found[-1]
            if not rows:
                rows = [
                    "| where the time goes (sink messages) | median message, ms | slowest 1%, ms |",
                    "|---|---|---|",
                ]
            rows.append(
                f"| **offered {float(rate):.0f} msgs/s{whose}** ({t['messages']} messages) "
                f"| {t['median']['total']:,.1f} | {t['slowest']['total']:,.1f} |"
            )
            for stage, what in TAIL_STAGES:
                rows.append(
                    f"| ... {stage}: {what} | {t['median'][stage]:,.1f} "
                    f"| {t['slowest'][stage]:,.1f} |"
                )
    return rows


def maintenance_table(e2e: dict[str, Any]) -> list[str]:
    """Each timed run's p99 beside what PostgreSQL's own maintenance did meanwhile
    (``benchmarks.maintenance``), and the p99 of the runs it left alone: a run an autovacuum
    round fell into has that round's tail."""
    from benchmarks.maintenance import describe

    rows: list[str] = []
    theirs = (e2e.get("baseline") or {}).get("maintenance")
    for whose, upkeep in (("", e2e.get("maintenance")), (" (baseline)", theirs)):
        for rate, runs in (upkeep or {}).items():
            if not runs:
                continue
            if not rows:
                rows = [
                    "| PostgreSQL maintenance while timed (vacuums, analyzes, checkpoints) "
                    "| p99 ms | what ran (seconds with one running) |",
                    "|---|---|---|",
                ]
            for i, run in enumerate(runs, 1):
                rows.append(
                    f"| offered {float(rate):.0f} msgs/s{whose}, run {i} "
                    f"| {run['p99_ms']:,.1f} | {describe(run)} |"
                )
            quiet = [r["p99_ms"] for r in runs if not r["ran"] and not r.get("checkpoints")]
            if quiet and len(quiet) < len(runs):
                rows.append(
                    f"| offered {float(rate):.0f} msgs/s{whose}: p99 of the {len(quiet)} "
                    f"run(s) without maintenance | {_stat(quiet)['median']:,.1f} | |"
                )
    return rows


def _kinds(kinds: dict[str, float] | None) -> str:
    """Transactions per message by kind (the write budget: ingest, claim, finish, delivery)."""
    if not kinds:
        return "n/a (no pg_stat_statements)"
    return ", ".join(f"{kind} {per:.2f}" for kind, per in kinds.items())


def _stat(values: list[float]) -> Stat:
    ordered = sorted(values)
    return {"median": ordered[len(ordered) // 2], "min": ordered[0], "max": ordered[-1]}


def _median(values: list[float | None]) -> float | None:
    known = sorted(v for v in values if v is not None)
    return known[len(known) // 2] if known else None


def e2e_table(results: dict[str, Any]) -> list[str]:
    e2e = results.get("e2e")
    if not e2e:
        return []
    load = e2e["sustained"]
    points = load["rss_mb"]
    if len(points) > 5:  # the report shows five; the JSON has them all
        points = [points[round(i * (len(points) - 1) / 4)] for i in range(5)]
    rss = ", ".join(f"{n:,}: {mb} MB" for n, mb in points)
    rows = [
        "| measure | value |",
        "|---|---|",
        f"| surfaces | {', '.join(load.get('surfaces', []))} |",
    ] + [f"| skipped: {k} | {why} |" for k, why in load.get("skipped_surfaces", {}).items()]
    for rate, lat in e2e["latency"].items():
        rows += [
            f"| offered {float(rate):.0f} msgs/s (all surfaces, new and ongoing threads): "
            f"answered msgs/s | {_f(lat['rate'])} |",
            f"| ... inbound sent → reply at the platform, p50 ms | {_f(lat['p50_ms'], 1)} |",
            f"| ... inbound sent → reply at the platform, p99 ms | {_f(lat['p99_ms'], 1)} |",
            *(
                [
                    "| ... p99 ms without the real homeserver (Matrix: Synapse's own sync hops) "
                    f"| {_f(lat['p99_local_ms'], 1)} |"
                ]
                if "p99_local_ms" in lat
                else []
            ),
            f"| ... replies lost | {lat['lost']['max']:.0f} |",
        ]
        per = [
            f"{k[: -len('_p50_ms')]} {v['median']:.1f} ms ({lat[k[:-7] + '_share']['median']:.0%})"
            for k, v in lat.items()
            if k.endswith("_p50_ms") and k != "p50_ms"
        ]
        if per:
            rows.append(f"| ... p50 by surface (share of messages) | {', '.join(per)} |")
    return (
        rows
        + [
            f"| sustained, {load['concurrency']} conversations waiting for answers, msgs/s "
            f"| {load['rate']:,.0f} (p50 {load['p50_ms']:.0f} ms, p99 {load['p99_ms']:.0f} ms) |",
            f"| gateway process CPU per message (sustained phase) "
            f"| {load['gateway_cpu_ms_per_msg']:.2f} ms |",
            f"| database transactions per message (sustained phase) "
            f"| {load['db_transactions_per_msg']:.1f} |",
            f"| sessions served (planned) | {load['sessions']:,} ({load['sessions_planned']:,}) |",
            f"| gateway RSS at start | {load['rss_mb_at_start']} MB |",
            f"| gateway RSS after N sessions served | {rss} |",
        ]
        + [
            f"| gateway CPU profile (py-spy): {part} | {share:.0%} |"
            for part, share in load.get("profile", {}).items()
            if share >= 0.02
        ]
    )


def targets(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for each target of the issue that this run measured."""
    out: list[tuple[str, str, str]] = []
    hot = results.get("hot", {})

    def get(kind: str, conc: int) -> dict[str, Stat] | None:
        found: dict[str, Stat] | None = hot.get(kind, {}).get(conc) or hot.get(kind, {}).get(
            str(conc)
        )
        return found

    def verdict(ok: bool, how: str) -> str:
        return "met" if ok else f"missed ({how})"

    top = max((int(c) for c in hot.get("hot", {})), default=None)
    if top is not None:
        s = get("hot", top)
        assert s is not None
        rate, p99 = s["rate"]["median"], s["p99_ms"]["median"]
        ratio = s.get("ratio", {}).get("median")
        if ratio is not None:  # relative to pgbench measured in the same run
            out.append(
                (
                    f"hot path ≥ 0.30x pgbench's INSERT, p99 ≤ 15 ms (measured at {top})",
                    f"{ratio:.2f}x ({rate:,.0f} msgs/s), p99 {p99:.1f} ms",
                    verdict(
                        ratio >= 0.30 and p99 <= 15,
                        f"{ratio / 0.30:.0%} of the ratio, p99 {p99 / 15:.1f}x the bound",
                    ),
                )
            )
        else:
            out.append(
                (
                    f"hot path ≥ 2,500 msgs/s at 16, p99 ≤ 15 ms (measured at {top})",
                    f"{rate:,.0f} msgs/s, p99 {p99:.1f} ms",
                    verdict(
                        rate >= 2500 and p99 <= 15,
                        f"{rate / 2500:.0%} of the rate, p99 {p99 / 15:.1f}x the bound",
                    ),
                )
            )
    for kind, label in (("recent50", "recent-50"), ("context50", "context-50")):
        s = get(kind, 1)
        if s is not None:
            p99 = s["p99_ms"]["median"]
            out.append(
                (
                    f"{label} read p99 ≤ 2 ms (one caller)",
                    f"{p99:.2f} ms",
                    verdict(p99 <= 2, f"{p99 / 2:.1f}x"),
                )
            )
    length = results.get("length")
    if length and "ours" in length["growth"]:
        g = length["growth"]["ours"]
        out.append(
            (
                "flat per-message cost from 10 to the longest session",
                f"x{g:.2f}",
                verdict(g <= 1.5, f"grew x{g:.1f}"),
            )
        )
    e2e = results.get("e2e")
    if e2e:
        top, lat = max(e2e["latency"].items(), key=lambda kv: float(kv[0]))
        rate = float(top)
        p50, p99 = lat["p50_ms"]["median"], lat["p99_ms"]["median"]
        # the gateway's tail, without a real homeserver's own hops (reported beside it)
        local = "p99_local_ms" in lat
        p99 = lat["p99_local_ms"]["median"] if local else p99
        out.append(
            (
                f"end to end p50 ≤ 5 ms, p99 ≤ 25 ms at {rate:.0f} msgs/s",
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms" + (" (local fakes)" if local else ""),
                verdict(
                    p50 <= 5 and p99 <= 25, f"p50 {p50 / 5:.1f}x, p99 {p99 / 25:.1f}x the bound"
                ),
            )
        )
        load = e2e["sustained"]
        tx, cpu = load["db_transactions_per_msg"], load["gateway_cpu_ms_per_msg"]
        out.append(
            (
                "at most 4 database transactions per message (sustained phase)",
                f"{tx:.2f}",
                verdict(tx <= 4, f"{tx / 4:.1f}x the bound"),
            )
        )
        out.append(
            (
                "at most 1.5 ms gateway CPU per message, echo agent (sustained phase)",
                f"{cpu:.2f} ms",
                verdict(cpu <= 1.5, f"{cpu / 1.5:.1f}x the bound"),
            )
        )
        out.append(
            (
                "sustained ≥ 600 msgs/s",
                f"{load['rate']:,.0f} msgs/s",
                verdict(load["rate"] >= 600, f"{load['rate'] / 600:.0%} of it"),
            )
        )
        rss = e2e["sustained"]["rss_mb"]
        if len(rss) >= 2:
            grew = rss[-1][1] - rss[0][1]
            out.append(
                (
                    "RSS does not grow with sessions served",
                    f"{rss[0][1]} MB at {rss[0][0]:,} → {rss[-1][1]} MB at {rss[-1][0]:,}",
                    verdict(grew <= max(10.0, 0.1 * rss[0][1]), f"+{grew:.1f} MB"),
                )
            )
    return out


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    lines = [
        f"### Benchmarks ({'quick' if meta['quick'] else 'full'} run, {meta['runs']} runs per "
        f"figure: median (min-max))",
        "",
        f"{meta['machine']}; PostgreSQL {meta['server_version']} "
        f"({'embedded, throwaway' if meta['embedded'] else 'DATABASE_URL'}), "
        + ", ".join(f"{k}={v}" for k, v in sorted(meta["server_settings"].items()))
        + f"; {meta['sessions']:,} sessions; took {meta['seconds']:.0f} s; load average "
        + " → ".join(str(x) for x in meta.get("load_average", []))
        + " (start → end).",
        "",
    ]
    for name, why in results.get("skipped", {}).items():
        lines += [f"- section `{name}` skipped: {why}"]
    for name, why in results.get("failed", {}).items():
        lines += [f"- section `{name}` failed: {why} (the others ran)"]
    if results.get("skipped") or results.get("failed"):
        lines.append("")
    if results.get("hot") or results.get("limit"):
        lines += ["#### 1-2. The limit (pgbench) and the store hot path", ""]
        lines += hot_table(results)
        lines.append("")
    if results.get("length"):
        lines += ["#### 3. Cost versus conversation length (one caller)", ""]
        lines += length_table(results)
        lines.append("")
    if results.get("e2e"):
        lines += ["#### 4. End to end (a `gateway run` process, echo agent)", ""]
        lines += e2e_table(results)
        lines.append("")
        lines += ["#### 4b. What one message costs", ""]
        lines += per_message_table(results)
        lines.append("")
    if results.get("kb"):  # knowledge base
        from benchmarks.kb import kb_markdown

        lines += ["#### 5. Knowledge base (local embedder, hybrid retrieval)", ""]
        lines += kb_markdown(results["kb"])
        lines.append("")
    if results.get("schedules"):  # schedules
        from benchmarks.schedules import schedules_markdown

        lines += ["#### 7. Schedules: due at one instant, fired by two replicas, each once", ""]
        lines += schedules_markdown(results["schedules"])
    if results.get("stream"):  # streaming
        from benchmarks.stream import stream_markdown

        lines += ["#### 6. Time to first visible text (Telegram, fake model streaming)", ""]
        lines += stream_markdown(results["stream"])
        lines.append("")
    if results.get("scale"):  # cost as the database grows
        from benchmarks.scale import scale_markdown

        lines += ["#### 8. Cost as the database grows (one caller, the store's own code)", ""]
        lines += scale_markdown(results["scale"])
    t = targets(results)
    if t:
        lines += ["#### Targets", "", "| target | measured | verdict |", "|---|---|---|"]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in t]
        lines.append("")
    return "\n".join(lines)
