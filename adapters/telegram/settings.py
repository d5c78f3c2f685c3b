"""Telegram's own settings (``TELEGRAM_*``), read like the core's (environment, ``.env``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.core.errors import ConfigError
from gateway.core.plugins import SurfaceSettings
from gateway.core.settings import CsvList, split_csv


class TelegramSettings(SurfaceSettings):
    #: the bot token from BotFather; set, Telegram is on
    telegram_bot_token: SecretStr | None = Field(default=None, alias="TELEGRAM_BOT_TOKEN")
    #: the Bot API server, the token appended
    telegram_api_base_url: str = Field(
        default="https://api.telegram.org/bot", alias="TELEGRAM_API_BASE_URL"
    )
    #: how updates arrive: `polling` (no public URL needed) or `webhook`
    telegram_mode: Literal["polling", "webhook"] = Field(default="polling", alias="TELEGRAM_MODE")
    #: for `TELEGRAM_MODE=webhook`: the public https URL registered with Telegram
    telegram_webhook_url: str | None = Field(default=None, alias="TELEGRAM_WEBHOOK_URL")
    #: for `TELEGRAM_MODE=webhook`: checked on `X-Telegram-Bot-Api-Secret-Token` (1-256 of `A-Z a-z
    #: 0-9 _ -`)
    telegram_webhook_secret: SecretStr | None = Field(default=None, alias="TELEGRAM_WEBHOOK_SECRET")
    #: chat ids (`-100...`) the bot answers in; unset: all (see the answer rules)
    telegram_allowed_chats: CsvList = Field(default_factory=list, alias="TELEGRAM_ALLOWED_CHATS")
    #: user ids the bot answers; unset: all
    telegram_allowed_users: CsvList = Field(default_factory=list, alias="TELEGRAM_ALLOWED_USERS")
    #: chats (ids) where every message is answered, not only mentions/replies/commands
    telegram_answer_all_chats: CsvList = Field(
        default_factory=list, alias="TELEGRAM_ANSWER_ALL_CHATS"
    )
    #: override of GATEWAY_STREAMING for Telegram (unset: follow it)
    telegram_streaming: bool | None = Field(default=None, alias="TELEGRAM_STREAMING")

    _split = field_validator(
        "telegram_allowed_chats",
        "telegram_allowed_users",
        "telegram_answer_all_chats",
        mode="before",
    )(split_csv)

    @field_validator("telegram_webhook_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _contradictions(self) -> TelegramSettings:
        if self.telegram_mode == "webhook" and self.telegram_bot_token:
            if not self.telegram_webhook_url:
                raise ConfigError("TELEGRAM_WEBHOOK_URL", "required when TELEGRAM_MODE=webhook")
        return self

    def streaming(self) -> bool | None:
        return self.telegram_streaming
