"""``python -m benchmarks.instructions CHECKOUT[,CHECKOUT...] [--messages N]``: the gateway's
CPU per message as a count of instructions, not a time: each checkout's ``gateway run`` (sink
surface, echo agent, one replica) runs under ``valgrind --tool=callgrind``, is warmed up,
and then answers ``--messages`` new conversations, a few at a time; the instructions it
executed for them (its own process, PostgreSQL not counted), divided by the messages, are
the figure.

Time per message on a shared 2-core machine moves by a fifth from run to run and with the
order of a pair, so a change worth a few percent cannot be seen in it. An instruction count
moves with the code and barely with the machine's load: what changes it is how the work
falls into batches and loop turns, which a fixed, low concurrency keeps alike. It is not a
time (a cache miss costs more than an add), so it says which code does less, and the timed
benchmarks say how much faster that is. Under valgrind the gateway runs about fifty times
slower: a few hundred messages take a couple of minutes per checkout."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from benchmarks import e2e
from benchmarks.common import db_snapshot, scratch_database, server

#: conversations at once: low, so that batching (group commits, loop turns) stays alike
CONCURRENCY = 4
WARM_UP = 40


async def _control(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        "callgrind_control",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: {out.decode()[-500:]}")
    return out.decode()


def _instructions(dump: Path) -> int:
    """The ``summary:``/``totals:`` line of a callgrind dump (the Ir event)."""
    text = dump.read_text(errors="replace")
    match = re.search(r"^(?:totals|summary):\s+(\d+)", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals in {dump}")
    return int(match.group(1))


async def _one(dsn: str, repo: Path, messages: int, phase: int) -> dict[str, Any]:
    wrapper = [
        "valgrind",
        "--tool=callgrind",
        "--dump-instr=no",
        "--compress-strings=no",
    ]
    async with AsyncExitStack() as stack:
        out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-callgrind-")))
        wrapper.append(f"--callgrind-out-file={out}/callgrind.out.%p")
        proc, driver, _ = await stack.enter_async_context(
            e2e.sink_only(
                dsn,
                repo,
                first_token=phase * 10_000_000,
                prefix=f"i{phase}-",
                wrapper=wrapper,
                ready_within=600,
            )
        )
        await e2e.sustained(
            driver, proc.pid, sessions=WARM_UP, concurrency=CONCURRENCY, max_seconds=600
        )
        before = await db_snapshot(dsn)
        await _control("--zero", str(proc.pid))
        load = await e2e.sustained(
            driver, proc.pid, sessions=messages, concurrency=CONCURRENCY, max_seconds=1800
        )
        await _control("--dump", str(proc.pid))
        after = await db_snapshot(dsn)
        dumps = sorted(out.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
        measured = [d for d in dumps if not d.name.endswith(f".{proc.pid}")]
        count = _instructions(measured[-1] if measured else dumps[-1])
        served = load["sessions"]
        cost = e2e.database_cost(before, after, served, None)
        return {
            "messages": served,
            "instructions_per_msg": count / served,
            "db_transactions_per_msg": cost["db_transactions_per_msg"],
        }


async def main(repos: list[Path], messages: int) -> dict[Path, dict[str, Any]]:
    results: dict[Path, dict[str, Any]] = {}
    async with server(os.environ.get("DATABASE_URL")) as srv, AsyncExitStack() as stack:
        # a database per checkout, migrated by its own gateway
        dsns = [
            await stack.enter_async_context(scratch_database(srv, migrated=False)) for _ in repos
        ]
        for j, repo in enumerate(repos):
            results[repo] = await _one(dsns[j], repo, messages, j + 1)
            r = results[repo]
            print(
                f"{repo}: {r['instructions_per_msg'] / 1e6:.2f} M instructions per message "
                f"({r['messages']} messages), {r['db_transactions_per_msg']:.2f} transactions",
                flush=True,
            )
    last = results[repos[-1]]["instructions_per_msg"]
    for repo, r in results.items():
        print(f"{repo}: ÷ {repos[-1]} = {r['instructions_per_msg'] / last:.3f}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", help="comma-separated checkouts; ratios are to the last")
    parser.add_argument("--messages", type=int, default=300)
    args = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind (with callgrind_control) is needed: apt-get install valgrind")
    asyncio.run(main([Path(p).resolve() for p in args.checkouts.split(",")], args.messages))
