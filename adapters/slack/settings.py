"""Slack's own settings (``SLACK_*``), read like the core's (environment, ``.env``)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.core.errors import ConfigError
from gateway.core.plugins import SurfaceSettings
from gateway.core.settings import CsvList, split_csv


class SlackSettings(SurfaceSettings):
    #: the Bot User OAuth Token (`xoxb-`); set, Slack is on
    slack_bot_token: SecretStr | None = Field(default=None, alias="SLACK_BOT_TOKEN")
    #: the app's signing secret: events arrive at `POST /slack/events` (Events API)
    slack_signing_secret: SecretStr | None = Field(default=None, alias="SLACK_SIGNING_SECRET")
    #: an app-level token (`xapp-`): Socket Mode instead of HTTP
    slack_app_token: SecretStr | None = Field(default=None, alias="SLACK_APP_TOKEN")
    #: the Web API base URL
    slack_api_base_url: str = Field(default="https://slack.com/api/", alias="SLACK_API_BASE_URL")
    #: answer thread follow-ups only when mentioned
    slack_require_mention: bool = Field(default=False, alias="SLACK_REQUIRE_MENTION")
    #: allow-lists, same semantics as TELEGRAM_ALLOWED_CHATS/USERS: when set, a message from
    #: another channel or person is ignored, with the reason stored
    slack_allowed_channels: CsvList = Field(default_factory=list, alias="SLACK_ALLOWED_CHANNELS")
    #: user ids (`U...`) the bot answers; unset: all
    slack_allowed_users: CsvList = Field(default_factory=list, alias="SLACK_ALLOWED_USERS")
    #: channels (ids) where every message is answered, as TELEGRAM_ANSWER_ALL_CHATS
    slack_answer_all_channels: CsvList = Field(
        default_factory=list, alias="SLACK_ANSWER_ALL_CHANNELS"
    )
    #: override of GATEWAY_STREAMING for Slack (unset: follow it)
    slack_streaming: bool | None = Field(default=None, alias="SLACK_STREAMING")

    _split = field_validator(
        "slack_allowed_channels",
        "slack_allowed_users",
        "slack_answer_all_channels",
        mode="before",
    )(split_csv)

    @model_validator(mode="after")
    def _contradictions(self) -> SlackSettings:
        if self.slack_bot_token and not (self.slack_signing_secret or self.slack_app_token):
            raise ConfigError(
                "SLACK_SIGNING_SECRET",
                "Slack needs SLACK_SIGNING_SECRET (Events API) or SLACK_APP_TOKEN (Socket Mode)",
            )
        if (self.slack_signing_secret or self.slack_app_token) and not self.slack_bot_token:
            raise ConfigError("SLACK_BOT_TOKEN", "required when Slack ingress is configured")
        if self.slack_app_token and not self.slack_app_token.get_secret_value().startswith("xapp-"):
            raise ConfigError("SLACK_APP_TOKEN", "must be an app-level token starting with xapp-")
        return self

    def streaming(self) -> bool | None:
        return self.slack_streaming
