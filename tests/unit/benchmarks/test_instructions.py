"""The instruction count is read from a real callgrind dump, as valgrind itself reports it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.instructions import _instructions

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not here")


def _count(tmp_path: Path, n: int) -> tuple[int, int]:
    out = tmp_path / f"callgrind.{n}"
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-S",
            "-c",
            f"sum(range({n}))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    said = re.search(r"Collected : (\d+)", done.stderr)
    assert said is not None, done.stderr[-500:]
    return _instructions(out), int(said.group(1))


def test_the_count_is_callgrinds_own_and_grows_with_the_work(tmp_path: Path) -> None:
    small, small_said = _count(tmp_path, 10_000)
    large, large_said = _count(tmp_path, 1_000_000)
    assert (small, large) == (small_said, large_said)
    # a million additions more cost tens of millions of instructions, Python's start the same
    assert large - small > 20_000_000
