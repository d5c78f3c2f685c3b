"""A settings group is a field of ``Settings`` (``settings.retention``), not a base class, and
users see no difference: the same flat names from the environment and the same ``.env`` file,
a bad value named by its variable (start-up exits with 2), and the reference page lists them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.errors import ConfigError
from gateway.core.ops_settings import OpsAccessSettings
from gateway.core.settings import Settings, load_settings
from gateway.core.settings_groups import RetentionSettings, settings_groups
from gateway.ops.docgen import settings as documented


def test_the_group_is_read_from_the_same_env_file_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = tmp_path / "gateway.env"
    env.write_text("GATEWAY_RETENTION_USAGE_DAYS=40\nGATEWAY_HTTP_PORT=9001\n")
    monkeypatch.setenv("GATEWAY_RETENTION_PAYLOAD_DAYS", "7")
    monkeypatch.setenv("RETENTION", "not json")  # a stray variable named like the field
    settings = load_settings(_env_file=env)
    assert settings.gateway_http_port == 9001
    kept = settings.retention
    assert (kept.gateway_retention_usage_days, kept.gateway_retention_payload_days) == (40, 7)
    # explicit values win, by variable name or by field name, as for every setting
    by_name = load_settings(_env_file=env, GATEWAY_RETENTION_USAGE_DAYS=50).retention
    assert by_name.gateway_retention_usage_days == 50
    by_field = Settings(_env_file=None, gateway_retention_dedupe_days=3)  # type: ignore[call-arg]
    assert by_field.retention.gateway_retention_dedupe_days == 3


def test_a_bad_group_value_is_named_by_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_RETENTION_INTERVAL_SECONDS", "often")
    with pytest.raises(ConfigError, match=r"^GATEWAY_RETENTION_INTERVAL_SECONDS: "):
        load_settings(_env_file=None)
    env = tmp_path / "gateway.env"
    env.write_text("GATEWAY_RETENTION_PAYLOAD_DAYS=-1\n")
    monkeypatch.delenv("GATEWAY_RETENTION_INTERVAL_SECONDS")
    with pytest.raises(ConfigError, match=r"^GATEWAY_RETENTION_PAYLOAD_DAYS: "):
        load_settings(_env_file=env)


def test_groups_are_fields_and_listed_on_the_reference_page() -> None:
    assert RetentionSettings not in Settings.__mro__
    assert OpsAccessSettings not in Settings.__mro__
    assert settings_groups(Settings) == {"retention": RetentionSettings, "ops": OpsAccessSettings}
    names = [s.name for s in documented()]
    assert "GATEWAY_RETENTION_PAYLOAD_DAYS" in names and "RETENTION" not in names
    assert "GATEWAY_OPS_AUTH" in names and "OPS" not in names
    assert names.index("GATEWAY_RETENTION_PAYLOAD_DAYS") > names.index("GATEWAY_FILES_S3_PREFIX")
