"""The suite's coverage figure: one line per shipped package and the total, at the end of every
run (pytest-cov measures, ``addopts`` in pyproject.toml asks for no report of its own; xdist's
workers send their data to the controller, which prints this). A pytest hook, re-exported by
``tests/conftest.py``."""

from __future__ import annotations

import io
from typing import Any

import pytest

PACKAGES = ("gateway", "session_store", "adapters")


def package_figures(cov: Any) -> list[tuple[str, float]]:
    """``[(package, percent of lines run), ..., ("total", percent)]`` from a coverage object
    whose data is complete (combined): one report, its per-file lines summed by package (each
    report analyses every source file again, so one, not four)."""
    from coverage.exceptions import NoDataError

    out = io.StringIO()
    try:
        cov.report(file=out, ignore_errors=True, precision=1)
    except NoDataError:
        return []
    sums: dict[str, list[int]] = {name: [0, 0] for name in (*PACKAGES, "total")}
    for line in out.getvalue().splitlines():
        fields = line.split()
        if len(fields) < 4 or not (fields[1].isdigit() and fields[2].isdigit()):
            continue
        name = fields[0].replace("\\", "/").split("/", 1)[0]
        for key in (name, "total") if name in PACKAGES else ():
            sums[key][0] += int(fields[1])
            sums[key][1] += int(fields[2])
    return [
        (name, 100.0 * (statements - missed) / statements)
        for name, (statements, missed) in sums.items()
        if statements
    ]


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    if controller is None or hasattr(config, "workerinput"):
        return  # --no-cov, or an xdist worker (the controller reports)
    figures = package_figures(controller.cov)
    if not figures:
        return
    terminalreporter.write_sep("=", "coverage (lines)")
    for name, percent in figures:
        terminalreporter.write_line(f"{name:<14} {percent:5.1f}%")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A test marked ``untraced`` runs with coverage's tracer stopped (the hypothesis fuzzers:
    thousands of inputs through lines other tests run too; pyproject.toml). pytest-cov's own
    ``no_cover`` marker fails under ``--no-cov``; this one does nothing then."""
    if item.get_closest_marker("untraced") is None:
        return (yield)
    from coverage import Coverage

    cov = Coverage.current()
    if cov is None:  # --no-cov
        return (yield)
    cov.stop()
    try:
        return (yield)
    finally:
        cov.start()
