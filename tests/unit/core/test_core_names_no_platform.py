"""The settings, setup, doctor, the composition root and the registry name no platform: each
platform's part lives in its own package (adapters/<platform>/plugin.py, settings.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

PLATFORM_NAMES = re.compile(r"telegram|slack|mattermost", re.IGNORECASE)
MODULES = (
    "gateway.core.settings",
    "gateway.ops.setup",
    "gateway.ops.doctor",
    "gateway.runtime.gateway",
    "gateway.core.registry",
    "gateway.http.guard",
    "gateway.ops.cli",
)


def platform_lines(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{path.name}:{n}: {line}" for n, line in enumerate(lines, 1) if PLATFORM_NAMES.search(line)
    ]


def test_the_scanner_finds_a_planted_name(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("x = 1\nif settings.slack_bot_token:\n    pass\n")
    assert platform_lines(planted) == ["planted.py:2: if settings.slack_bot_token:"]


@pytest.mark.parametrize("module", MODULES)
def test_the_module_names_no_platform(module: str) -> None:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    assert platform_lines(Path(spec.origin)) == []
