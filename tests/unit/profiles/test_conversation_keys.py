"""A profile's conversation keys: ``burst_seconds`` (0..10) and ``while_answering`` (queue or
restart), and their settings ``GATEWAY_BURST_SECONDS`` / ``GATEWAY_WHILE_ANSWERING``; a bad
value is refused naming the key or the setting."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.core.config_file import parse_config_text
from gateway.core.errors import ConfigError
from gateway.core.settings import Settings
from gateway.profiles.model import ProfileBook
from gateway.profiles.parse import KnownTools, parse_profiles


def book(body: str) -> ProfileBook:
    config = parse_config_text(f"[profiles.support]\n{body}\n")
    return parse_profiles(config, models=["gpt-4o-mini"], tools=KnownTools())


def test_the_keys_are_read() -> None:
    profile = book('burst_seconds = 2\nwhile_answering = "restart"').profiles["support"]
    assert profile.burst_seconds == 2.0 and profile.while_answering == "restart"
    assert profile.describe()["burst_seconds"] == 2.0


def test_unset_keys_follow_the_settings() -> None:
    profile = book('answer = "all"').profiles["support"]
    assert profile.burst_seconds is None and profile.while_answering is None


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("burst_seconds = 11", "burst_seconds"),
        ("burst_seconds = -1", "burst_seconds"),
        ("burst_seconds = true", "burst_seconds"),
        ('while_answering = "drop"', "while_answering"),
    ],
)
def test_a_bad_value_is_refused_naming_the_key(body: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        book(body)


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_the_settings_default_to_off_and_queue() -> None:
    s = settings()
    assert s.gateway_burst_seconds == 0 and s.gateway_while_answering == "queue"


@pytest.mark.parametrize(
    ("name", "value"),
    [("GATEWAY_BURST_SECONDS", "10.5"), ("GATEWAY_WHILE_ANSWERING", "interrupt")],
)
def test_a_bad_setting_is_refused_naming_it(name: str, value: str) -> None:
    with pytest.raises(ValidationError, match=name):
        settings(**{name: value})
