"""The benchmark command runs end to end with tiny sizes (no timing is asserted: this proves it
works, a real run measures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testsupport.paths import REPO


@pytest.mark.slow
def test_benchmarks_run_every_section_and_write_json(tmp_path: Path, pg_server: str) -> None:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env["DATABASE_URL"] = pg_server  # the suite's server: no second embedded one
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--tiny", "--runs", "1", "--json", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # on a busy 2-core machine the tiny run takes 2.5-3 minutes
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = proc.stdout
    for heading in (
        "The limit (pgbench)",
        "Cost versus conversation length",
        "End to end",
        "Knowledge base",
        "Time to first visible text",
        "Cost as the database grows",
    ):
        assert heading in report
    results = json.loads(out.read_text())
    hot = results["hot"]
    kinds = {"hot", "ingest", "recent50", "context50", "delta"}
    assert kinds <= set(hot)
    assert hot["hot"]["2"]["rate"]["median"] > 0
    assert hot["ingest"]["2"]["ratio"]["median"] > 0  # ours ÷ pgbench, same run
    assert results["limit"]["insert"]["2"]["rate"]["median"] > 0
    assert set(results["length"]["patterns"]) >= {"ours", "blob"}
    e2e = results["e2e"]
    assert [lat["lost"]["max"] for lat in e2e["latency"].values()] == [0]
    assert len(e2e["sustained"]["rss_mb"]) >= 2
    kb = results["kb"]
    assert set(kb["recall"]["recall_at_5"]) == {"lexical", "vector", "fused"}
    assert kb["ingest"]["pdf"]["pages_per_s"] > 0
    stream = results["stream"]
    assert stream["streaming"]["topic_first"]["median"] > 0
    assert stream["one_piece"]["topic_final"]["median"] > 0
    scale = results["scale"]  # three sizes of one growing database, every figure at each
    assert [s["messages"] for s in scale["steps"]] == [1_000, 2_000, 4_000]
    assert set(scale["labels"]) <= set(scale["steps"][-1]["figures"])
    assert set(scale["plans"]) == set(scale["labels"]) - {"control"}
