"""The settings groups ``Settings`` holds as fields, and how every settings class is read.

A group is a ``BaseSettings`` class of its own: ``Settings`` reads each of its group fields
from the same sources as itself (the environment, the same ``.env`` file, the same explicit
values), so the names users set stay flat (``GATEWAY_RETENTION_PAYLOAD_DAYS``, not a nested
``RETENTION__...``) and a bad one is named by that name. Fields are named as their
environment names in lower case, like every setting (the error and the reference page use
the name).

The retention group (``GATEWAY_RETENTION_*`` and ``GATEWAY_AUDIT_RETENTION_DAYS``): how long
each kind of stored data is kept; the ``[retention]`` table of the config file overrides it
(``gateway.retention.policy``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

#: how every settings class is read: environment variables and a ``.env`` file, by their
#: exact names (any case), other variables ignored
SETTINGS_SOURCES = SettingsConfigDict(
    env_file=".env",
    env_file_encoding="utf-8",
    extra="ignore",
    case_sensitive=False,
    populate_by_name=True,
)


def settings_groups(cls: type[BaseSettings]) -> dict[str, type[BaseSettings]]:
    """The fields of ``cls`` that are settings groups, by field name."""
    return {
        name: field.annotation
        for name, field in cls.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseSettings)
    }


def read_groups(cls: type[BaseSettings], sources: dict[str, Any]) -> dict[str, BaseSettings]:
    """Each settings group of ``cls`` not given in ``sources``, read from ``sources`` (explicit
    values and ``_env_file``) and the environment; a bad value raises pydantic's error, whose
    location is the setting's name."""
    return {
        name: group(**sources)
        for name, group in settings_groups(cls).items()
        if name not in sources
    }


class RetentionSettings(BaseSettings):
    """Retention."""

    model_config = SETTINGS_SOURCES

    # --- retention ----------------------------------------------------------------------
    #: days an accepted inbound event keeps its raw payload (the row and its dedupe keys
    #: stay); 0 keeps payloads
    gateway_retention_payload_days: int = Field(
        default=30, ge=0, le=36500, alias="GATEWAY_RETENTION_PAYLOAD_DAYS"
    )
    #: days a dead letter (a rejected or ignored inbound event) is kept; 0 keeps them all
    gateway_retention_dead_letter_days: int = Field(
        default=90, ge=0, le=36500, alias="GATEWAY_RETENTION_DEAD_LETTER_DAYS"
    )
    #: days an inbound event's dedupe keys are kept, so a redelivery within them is refused
    #: (at least the platforms' redelivery horizon: days); 0 keeps them all
    gateway_retention_dedupe_days: int = Field(
        default=90, ge=0, le=36500, alias="GATEWAY_RETENTION_DEDUPE_DAYS"
    )
    #: closed sessions whose last message is older than this many months are exported to
    #: GATEWAY_RETENTION_EXPORT_DIR and then deleted; 0 keeps them all
    gateway_retention_closed_session_months: int = Field(
        default=0, ge=0, le=1200, alias="GATEWAY_RETENTION_CLOSED_SESSION_MONTHS"
    )
    #: where closed sessions are exported (one JSON-lines file per session) before they are
    #: deleted; unset: `retention-exports` under GATEWAY_DATA_DIR
    gateway_retention_export_dir: Path | None = Field(
        default=None, alias="GATEWAY_RETENTION_EXPORT_DIR"
    )
    #: days of usage-ledger rows kept: 0 keeps them all, else at least 32 (the monthly budgets
    #: read the whole current month)
    gateway_retention_usage_days: int = Field(
        default=0, ge=0, le=36500, alias="GATEWAY_RETENTION_USAGE_DAYS"
    )
    #: days of audit events kept (whole months are dropped once past it); 0 keeps them all
    gateway_audit_retention_days: int = Field(
        default=400, ge=0, le=36500, alias="GATEWAY_AUDIT_RETENTION_DAYS"
    )
    #: seconds between retention runs (on one replica)
    gateway_retention_interval_seconds: float = Field(
        default=3600.0, ge=1.0, le=86400.0, alias="GATEWAY_RETENTION_INTERVAL_SECONDS"
    )
