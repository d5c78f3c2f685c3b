"""``gateway profiles check`` / ``show`` and start-up with a bad config file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.ops.cli import main
from tests.unit.profiles.test_resolution import CONFIG


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no .env from the developer's working directory
    path = tmp_path / "gateway.toml"
    path.write_text(CONFIG)
    monkeypatch.setenv("GATEWAY_CONFIG_FILE", str(path))
    monkeypatch.setenv("AGENT_MODEL", "gpt-4o-mini")
    monkeypatch.setenv("AGENT_MODELS", "gpt-4o-mini,gpt-4o,small")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@127.0.0.1:9/never")
    # files.read_* names a tool of the tools policy: the tools sections in the same file
    path.write_text(CONFIG + '\n[tools."files.read_file"]\ndomains = ["files"]\n')
    return path


def test_check_says_ok(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "check"]) == 0
    assert capsys.readouterr().out == f"{config}: ok, 5 profiles, 6 places\n"


@pytest.mark.parametrize(
    ("change", "entry"),
    [
        (('"slack:T1:*" = "private"', '"slack:T1:*" = "privat"'), '[places]."slack:T1:*"'),
        (('model = "small"', 'model = "o9"'), "[profiles.private].model"),
        (("tools = []", 'tools = ["nothing_*"]'), "[profiles.private].tools"),
        (('"slack:T1:*"', '"slack:T1"'), '[places]."slack:T1"'),
        (("[places]", "[places"), "not valid TOML"),
        (('model = "small"', 'model = "small"\non_edit = "rewrite"'), "[profiles.private].on_edit"),
        (('model = "small"', 'model = "small"\non_delete = true'), "[profiles.private].on_delete"),
    ],
)
def test_check_and_run_exit_2_naming_the_first_bad_entry(
    config: Path, capsys: pytest.CaptureFixture[str], change: tuple[str, str], entry: str
) -> None:
    config.write_text(config.read_text().replace(*change))
    assert main(["profiles", "check"]) == 2
    assert f"configuration error: GATEWAY_CONFIG_FILE: {entry}" in capsys.readouterr().err
    assert main(["run"]) == 2  # before the database is started
    assert f"GATEWAY_CONFIG_FILE: {entry}" in capsys.readouterr().err


def test_show_prints_the_effective_profile_and_the_entry(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profiles", "show", "telegram:bot:-100123:77"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "place:         telegram:bot:-100123:77",
        'chosen by:     [places] "telegram:*:-100123:77" = "topic"',
        "profile:       topic",
        "system prompt: This topic is about releases.",
        "model:         gpt-4o-mini  (AGENT_MODEL)",
        "models:        gpt-4o-mini, gpt-4o, small  (AGENT_MODELS)",
        "tools:         the tools policy",
        "knowledge:     the thread, the chat",
        "answer:        mentions, or every message in GATEWAY_ANSWER_ALL_PLACES",
        "streaming:     true  (GATEWAY_STREAMING)",
    ]
    assert main(["profiles", "show", "slack:T9:C0SUPPORT", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["entry"] == {"place": "slack:*:C0SUPPORT", "profile": "support"}
    assert shown["profile"]["answer"] == "all" and shown["profile"]["streaming"] is False
    assert main(["profiles", "show", "slack:*:C1"]) == 1  # a place, not a pattern


def test_reload_without_a_running_gateway_says_so(
    config: Path,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert main(["reload"]) == 1
    assert "no gateway is running on this database" in capsys.readouterr().err
