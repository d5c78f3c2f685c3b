"""The benchmark command runs end to end with tiny sizes (no timing is asserted: this proves it
works, a real run measures).

One command per group of sections (``--only``), each its own test: together they run every
section, and the parallel workers take them side by side instead of one worker spending two
minutes on all of them in a row (the suite's slowest test before the split)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testsupport.paths import REPO


def _limit_and_hot(results: dict[str, Any]) -> None:
    hot = results["hot"]
    kinds = {"hot", "ingest", "recent50", "context50", "delta"}
    assert kinds <= set(hot)
    assert hot["hot"]["2"]["rate"]["median"] > 0
    assert hot["ingest"]["2"]["ratio"]["median"] > 0  # ours ÷ pgbench, same run
    assert results["limit"]["insert"]["2"]["rate"]["median"] > 0


def _length(results: dict[str, Any]) -> None:
    assert set(results["length"]["patterns"]) >= {"ours", "blob"}


def _e2e(results: dict[str, Any]) -> None:
    e2e = results["e2e"]
    assert [lat["lost"]["max"] for lat in e2e["latency"].values()] == [0]
    assert len(e2e["sustained"]["rss_mb"]) >= 2


def _kb(results: dict[str, Any]) -> None:
    kb = results["kb"]
    assert set(kb["recall"]["recall_at_5"]) == {"lexical", "vector", "fused"}
    assert kb["ingest"]["pdf"]["pages_per_s"] > 0


def _stream(results: dict[str, Any]) -> None:
    stream = results["stream"]
    assert stream["streaming"]["topic_first"]["median"] > 0
    assert stream["one_piece"]["topic_final"]["median"] > 0


def _schedules(results: dict[str, Any]) -> None:
    assert results["schedules"]["schedules"] == 200


def _scale(results: dict[str, Any]) -> None:
    scale = results["scale"]  # three sizes of one growing database, every figure at each
    assert [s["messages"] for s in scale["steps"]] == [1_000, 2_000, 4_000]
    assert set(scale["labels"]) <= set(scale["steps"][-1]["figures"])
    assert set(scale["plans"]) == set(scale["labels"]) - {"control"}


#: --only, the report's heading for it, and what its JSON must hold
GROUPS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    ("limit,hot", "The limit (pgbench)", _limit_and_hot),
    ("length", "Cost versus conversation length", _length),
    ("e2e", "End to end", _e2e),
    ("kb", "Knowledge base", _kb),
    ("stream", "Time to first visible text", _stream),
    ("schedules", "Schedules: due at one instant", _schedules),
    ("scale", "Cost as the database grows", _scale),
]


def test_the_groups_cover_every_section() -> None:
    from benchmarks.__main__ import SECTIONS

    covered = {s for only, _, _ in GROUPS for s in only.split(",")}
    assert covered == set(SECTIONS)


@pytest.mark.slow
@pytest.mark.parametrize(("only", "heading", "check"), GROUPS, ids=[g[0] for g in GROUPS])
def test_benchmarks_run_each_section_and_write_json(
    tmp_path: Path,
    pg_server: str,
    only: str,
    heading: str,
    check: Callable[[dict[str, Any]], None],
) -> None:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["DATABASE_URL"] = pg_server  # the suite's server: no second embedded one
    env["PYTHONPATH"] = str(REPO)
    args = ["--tiny", "--runs", "1", "--only", only, "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # on a busy 2-core machine the e2e group takes up to 2.5 minutes
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert heading in proc.stdout
    results = json.loads(out.read_text())
    assert "failed" not in results, results["failed"]
    check(results)
