"""The one command vocabulary every surface reads."""

from __future__ import annotations

import pytest

from gateway.core.commands import COMMANDS, command_name, parse_command


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/new", "new"),
        ("  /NEW  ", "new"),
        ("/new please", "new"),
        ("/model gpt-4o", "model"),
        ("/schedule at 2026-12-04 09:00 digest", "schedule"),
        ("/newer", None),
        ("/unknown", None),
        ("new", None),
        ("hello /new", None),
        ("", None),
        ("/new@GatewayBot", "new"),
        ("/new@OtherBot", None),
    ],
)
def test_command_name(text: str, expected: str | None) -> None:
    assert command_name(text, bot_username="gatewaybot") == expected


def test_the_argument_is_the_rest_of_the_text() -> None:
    parsed = parse_command('/schedule cron "0 9 * * 1-5"  standup ')
    assert parsed is not None
    assert (parsed.name, parsed.argument) == ("schedule", 'cron "0 9 * * 1-5"  standup')


def test_every_summary_fits_telegrams_menu() -> None:
    assert all(3 <= len(c.summary) <= 256 for c in COMMANDS.values())
    assert list(COMMANDS)[-1] == "help"
