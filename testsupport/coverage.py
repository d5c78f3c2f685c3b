"""The suite's coverage figure: one line per shipped package and the total, at the end of every
run (pytest-cov measures, ``addopts`` in pyproject.toml asks for no report of its own; xdist's
workers send their data to the controller, which prints this). A pytest hook, re-exported by
``tests/conftest.py``."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

PACKAGES = ("gateway", "session_store", "adapters")


def package_figures(cov: Any, root: Path) -> list[tuple[str, float]]:
    """``[(package, percent covered), ..., ("total", percent)]`` from a coverage object whose
    data is complete (combined)."""
    from coverage.exceptions import NoDataError

    figures = []
    for name in (*PACKAGES, "total"):
        include = None if name == "total" else [str(root / name / "*")]
        try:
            percent = cov.report(include=include, file=io.StringIO(), ignore_errors=True)
        except NoDataError:
            continue
        figures.append((name, float(percent)))
    return figures


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    if controller is None or getattr(plugin, "cov_total", None) is None:
        return  # --no-cov, a worker, or nothing measured
    figures = package_figures(controller.cov, Path(str(config.rootpath)))
    if not figures:
        return
    terminalreporter.write_sep("=", "coverage (lines)")
    for name, percent in figures:
        terminalreporter.write_line(f"{name:<14} {percent:5.1f}%")
