"""The benchmark never loses a run: a section whose optional dependency is missing is skipped
with how to install it, a failing one reports its error, the others still run, and what was
measured is written after each section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.__main__ import run_section, save
from benchmarks.report import markdown


async def test_a_missing_dependency_skips_and_a_failure_reports_while_the_others_run(
    tmp_path: Path,
) -> None:
    results: dict[str, Any] = {}
    out = tmp_path / "bench.json"
    written: list[set[str]] = []

    def saved() -> None:
        save(out, results)
        written.append(set(json.loads(out.read_text())))

    async def needs_fpdf() -> None:
        raise ModuleNotFoundError("No module named 'fpdf'", name="fpdf")

    async def breaks() -> None:
        raise RuntimeError("the scratch database went away")

    async def works() -> dict[str, int]:
        return {"rate": 42}

    await run_section("kb", needs_fpdf, results, save=saved)
    await run_section("e2e", breaks, results, save=saved)
    await run_section("stream", works, results, save=saved)

    assert results["skipped"] == {
        "kb": "needs fpdf: " + "pip install fpdf2 (in the test extra: pip install -e '.[test]')"
    }
    assert results["failed"] == {"e2e": "RuntimeError: the scratch database went away"}
    assert results["stream"] == {"rate": 42}
    # the file grew after every section, so a crash later keeps what came before
    assert written == [{"skipped"}, {"skipped", "failed"}, {"skipped", "failed", "stream"}]


def test_the_report_says_what_was_skipped_and_what_failed() -> None:
    meta = {
        "quick": True,
        "runs": 1,
        "machine": "2 CPUs",
        "server_version": "15",
        "embedded": True,
        "server_settings": {},
        "sessions": 1,
        "seconds": 1.0,
    }
    text = markdown(
        {"meta": meta, "skipped": {"kb": "needs fpdf: pip install fpdf2"}, "failed": {"e2e": "X"}}
    )
    assert "section `kb` skipped: needs fpdf" in text and "section `e2e` failed: X" in text
