"""Mattermost's own settings (``MATTERMOST_*``), read like the core's (environment, ``.env``)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.core.errors import ConfigError
from gateway.core.plugins import SurfaceSettings
from gateway.core.settings import CsvList, split_csv


class MattermostSettings(SurfaceSettings):
    #: the server URL (`https://host[:port][/path]`); set with MATTERMOST_TOKEN, Mattermost is on
    mattermost_url: str | None = Field(default=None, alias="MATTERMOST_URL")
    #: the bot account's access token
    mattermost_token: SecretStr | None = Field(default=None, alias="MATTERMOST_TOKEN")
    #: answer thread follow-ups only when mentioned
    mattermost_require_mention: bool = Field(default=False, alias="MATTERMOST_REQUIRE_MENTION")
    #: allow-lists: channel ids and user ids, as for Telegram and Slack
    mattermost_allowed_channels: CsvList = Field(
        default_factory=list, alias="MATTERMOST_ALLOWED_CHANNELS"
    )
    #: user ids the bot answers; unset: all
    mattermost_allowed_users: CsvList = Field(
        default_factory=list, alias="MATTERMOST_ALLOWED_USERS"
    )
    #: channels (ids) where every message is answered, as TELEGRAM_ANSWER_ALL_CHATS
    mattermost_answer_all_channels: CsvList = Field(
        default_factory=list, alias="MATTERMOST_ANSWER_ALL_CHANNELS"
    )
    #: the gateway's ``POST /mattermost/actions`` as the Mattermost server reaches it; set,
    #: approval cards get Approve/Deny buttons; unset, ✅/❌ reactions only
    mattermost_actions_url: str | None = Field(default=None, alias="MATTERMOST_ACTIONS_URL")
    #: override of GATEWAY_STREAMING for Mattermost (unset: follow it)
    mattermost_streaming: bool | None = Field(default=None, alias="MATTERMOST_STREAMING")

    _split = field_validator(
        "mattermost_allowed_channels",
        "mattermost_allowed_users",
        "mattermost_answer_all_channels",
        mode="before",
    )(split_csv)

    @field_validator("mattermost_url", "mattermost_actions_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _contradictions(self) -> MattermostSettings:
        if self.mattermost_url and not self.mattermost_token:
            raise ConfigError("MATTERMOST_TOKEN", "required when MATTERMOST_URL is set")
        if self.mattermost_token and not self.mattermost_url:
            raise ConfigError("MATTERMOST_URL", "required when MATTERMOST_TOKEN is set")
        if self.mattermost_actions_url and not self.mattermost_url:
            raise ConfigError("MATTERMOST_URL", "required when MATTERMOST_ACTIONS_URL is set")
        return self

    def streaming(self) -> bool | None:
        return self.mattermost_streaming
