"""The retention policy: the settings, the ``[retention]`` table over them entry by entry, and
a bad value named (setting or entry) so start-up exits with 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.core.config_file import ConfigFile, parse_config_text
from gateway.core.errors import ConfigError
from gateway.core.settings import Settings
from gateway.retention.policy import retention_policy


def _settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **{"GATEWAY_DATA_DIR": "/data", **values})  # type: ignore[call-arg]


def test_settings_give_the_policy_and_the_file_overrides_entry_by_entry() -> None:
    settings = _settings(GATEWAY_RETENTION_PAYLOAD_DAYS=7, GATEWAY_RETENTION_USAGE_DAYS=400)
    policy = retention_policy(settings, ConfigFile())
    assert (policy.payload_days, policy.usage_days, policy.dead_letter_days) == (7, 400, 90)
    assert policy.export_dir == Path("/data/retention-exports")
    assert policy.inbox_days() == 90
    file = parse_config_text(
        '[retention]\npayload_days = 3\nclosed_session_months = 24\nexport_dir = "/x"\n'
    )
    policy = retention_policy(settings, file)
    assert (policy.payload_days, policy.usage_days, policy.closed_session_months) == (3, 400, 24)
    assert policy.export_dir == Path("/x")
    # any inbox window kept forever keeps every inbox month
    assert retention_policy(_settings(GATEWAY_RETENTION_DEDUPE_DAYS=0), file).inbox_days() == 0


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("payload_days = -1", "[retention].payload_days"),
        ("usage_days = 1.5", "[retention].usage_days"),
        ("audit_days = true", "[retention].audit_days"),
        ("dedupe_days = 1", "[retention].dedupe_days"),
        ("usage_days = 31", "[retention].usage_days"),
        ("export_dir = 3", "[retention].export_dir"),
        ("forever = 1", "[retention].forever"),
    ],
)
def test_a_bad_entry_is_named(text: str, entry: str) -> None:
    with pytest.raises(ConfigError, match=entry.replace("[", r"\[").replace("]", r"\]")):
        retention_policy(_settings(), parse_config_text(f"[retention]\n{text}\n"))


def test_a_dedupe_window_shorter_than_the_redelivery_horizon_is_refused() -> None:
    with pytest.raises(ConfigError, match="GATEWAY_RETENTION_DEDUPE_DAYS"):
        retention_policy(_settings(GATEWAY_RETENTION_DEDUPE_DAYS=1), ConfigFile())


def test_a_ledger_window_shorter_than_a_month_is_refused() -> None:
    """The monthly budgets sum the current month's ledger: dropping rows inside it would let
    a place spend past its budget, so the budgets could not fail closed."""
    with pytest.raises(ConfigError, match=r"GATEWAY_RETENTION_USAGE_DAYS.*monthly budgets"):
        retention_policy(_settings(GATEWAY_RETENTION_USAGE_DAYS=20), ConfigFile())
    assert (
        retention_policy(_settings(GATEWAY_RETENTION_USAGE_DAYS=32), ConfigFile()).usage_days == 32
    )
