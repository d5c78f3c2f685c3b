"""The retention policy: ``GATEWAY_RETENTION_*`` settings, overridden entry by entry by the
``[retention]`` table of the config file. A bad entry is a ``ConfigError`` naming it
(``[retention].payload_days: ...``), so start-up exits with 2."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from gateway.core.config_file import ConfigFile
from gateway.core.errors import ConfigError
from gateway.core.settings import Settings

__all__ = ["RetentionPolicy", "retention_policy"]

#: the platforms redeliver within hours (Slack) to a day (Telegram keeps an update 24 hours):
#: dedupe keys are kept at least this long, whatever the policy says
MIN_DEDUPE_DAYS = 2
#: the monthly budgets sum the ledger since the first of the month: rows younger than the
#: longest month are never dropped, or a budget would see less than was spent (and widen)
MIN_USAGE_DAYS = 32

#: the windows other readers need: (field, setting, shortest non-zero value, why)
_MINIMUMS = (
    (
        "dedupe_days",
        "GATEWAY_RETENTION_DEDUPE_DAYS",
        MIN_DEDUPE_DAYS,
        "the platforms redeliver for a day",
    ),
    (
        "usage_days",
        "GATEWAY_RETENTION_USAGE_DAYS",
        MIN_USAGE_DAYS,
        "the monthly budgets read the whole current month",
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """Days (or months) each kind is kept; 0 keeps it forever."""

    payload_days: int = 30
    dead_letter_days: int = 90
    dedupe_days: int = 90
    closed_session_months: int = 0
    usage_days: int = 0
    audit_days: int = 400
    export_dir: Path = Path("retention-exports")
    interval: float = 3600.0

    def inbox_days(self) -> int:
        """Days after which a whole inbox month may be dropped: past every window that reads
        its rows (payloads, dead letters, dedupe keys); 0 while any of them keeps forever."""
        windows = (self.payload_days, self.dead_letter_days, self.dedupe_days)
        return 0 if 0 in windows else max(windows)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "export_dir": str(self.export_dir)
        }


_DAYS = {
    "payload_days": 36500,
    "dead_letter_days": 36500,
    "dedupe_days": 36500,
    "closed_session_months": 1200,
    "usage_days": 36500,
    "audit_days": 36500,
}


def retention_policy(settings: Settings, file: ConfigFile) -> RetentionPolicy:
    """The settings' policy with the config file's ``[retention]`` entries over it."""
    kept = settings.retention
    policy = RetentionPolicy(
        payload_days=kept.gateway_retention_payload_days,
        dead_letter_days=kept.gateway_retention_dead_letter_days,
        dedupe_days=kept.gateway_retention_dedupe_days,
        closed_session_months=kept.gateway_retention_closed_session_months,
        usage_days=kept.gateway_retention_usage_days,
        audit_days=kept.gateway_audit_retention_days,
        export_dir=kept.gateway_retention_export_dir
        or settings.gateway_data_dir / "retention-exports",
        interval=kept.gateway_retention_interval_seconds,
    )
    _check_minimums(policy, lambda field, setting, message: ConfigError(setting, message))
    policy = replace(policy, **_overrides(file.section("retention")))
    _check_minimums(
        policy, lambda field, setting, message: ConfigFile.error(f"[retention].{field}", message)
    )
    return policy


def _check_minimums(policy: RetentionPolicy, error: Callable[[str, str, str], ConfigError]) -> None:
    for field, setting, least, why in _MINIMUMS:
        if 0 < getattr(policy, field) < least:
            raise error(field, setting, f"must be 0 (keep) or at least {least}: {why}")


def _overrides(section: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in section.items():
        entry = f"[retention].{key}"
        if key in _DAYS:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigFile.error(entry, "must be a whole number (0 keeps forever)")
            if not 0 <= value <= _DAYS[key]:
                raise ConfigFile.error(entry, f"must be between 0 and {_DAYS[key]}")
            out[key] = value
        elif key == "export_dir":
            if not isinstance(value, str) or not value.strip():
                raise ConfigFile.error(entry, "must be a directory path")
            out[key] = Path(value).expanduser()
        else:
            known = ", ".join([*_DAYS, "export_dir"])
            raise ConfigFile.error(entry, f"unknown key; known: {known}")
    return out
