"""Configuration errors come all at once: every bad setting (core and each surface's) and
every bad config file entry is named in one message, so one run shows all there is to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.config_file import parse_config_text
from gateway.core.errors import ConfigError, ConfigErrors
from gateway.core.registry import load_checked_settings
from gateway.profiles.parse import KnownTools, parse_profiles

TOOLS = KnownTools(names=("search_knowledge",), servers=())


def _settings_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> ConfigError:
    monkeypatch.setenv("GATEWAY_ENV_FILE", str(tmp_path / "none.env"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_checked_settings()
    return raised.value


def test_every_bad_setting_is_named_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    error = _settings_error(
        monkeypatch,
        tmp_path,
        GATEWAY_HTTP_PORT="eighty",
        GATEWAY_TURN_WORKERS="0",
        TELEGRAM_MODE="carrier-pigeon",  # a surface's own setting, read beside the core's
    )
    assert isinstance(error, ConfigErrors)
    assert [e.setting for e in error.each] == [
        "GATEWAY_HTTP_PORT",
        "GATEWAY_TURN_WORKERS",
        "TELEGRAM_MODE",
    ]
    text = str(error)
    assert text.startswith("3 problems:")
    for name in ("GATEWAY_HTTP_PORT", "GATEWAY_TURN_WORKERS", "TELEGRAM_MODE"):
        assert f"\n  {name}: " in text, text
    assert error.setting == "GATEWAY_HTTP_PORT"  # the first, for callers that name one


def test_one_bad_setting_reads_as_before(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    error = _settings_error(monkeypatch, tmp_path, TELEGRAM_MODE="carrier-pigeon")
    assert not isinstance(error, ConfigErrors)
    assert error.setting == "TELEGRAM_MODE" and str(error).startswith("TELEGRAM_MODE: ")


BAD_FILE = """
[profiles.support]
model = "gpt-5-turbo-ultra"
colour = "blue"

[profiles.eng]
tools = ["no_such_tool"]
answer = "sometimes"

[places]
"slack:*:C0SUPPORT" = "support"
"telegram:*:-100123" = "sales"
"""


def test_every_bad_config_file_entry_is_named_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_profiles(parse_config_text(BAD_FILE), models=("gpt-4o-mini",), tools=TOOLS)
    text = str(raised.value)
    assert text.startswith("5 problems:"), text
    for entry in (
        "[profiles.support].colour",
        "[profiles.support].model",
        "[profiles.eng].tools",
        "[profiles.eng].answer",
        "[places].\"telegram:*:-100123\": unknown profile 'sales'",
    ):
        assert entry in text, (entry, text)
    # a place naming a profile that is itself bad is not a second problem
    assert '[places]."slack:*:C0SUPPORT"' not in text


def test_unknown_tables_are_named_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config_text("[profile.x]\nmodel = 'a'\n[budget]\nperson_per_day = 1\n")
    text = str(raised.value)
    assert "[budget]: unknown table" in text and "[profile]: unknown table" in text, text
