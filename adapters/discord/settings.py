"""Discord's own settings (``DISCORD_*``), read like the core's (environment, ``.env``)."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator

from gateway.core.plugins import SurfaceSettings

#: Discord's REST API, version 10 (platforms.md "Discord")
DEFAULT_API_BASE_URL = "https://discord.com/api/v10"


class DiscordSettings(SurfaceSettings):
    #: the bot's token (Developer Portal, Bot); set, Discord is on
    discord_bot_token: SecretStr | None = Field(default=None, alias="DISCORD_BOT_TOKEN")
    #: the REST API base; the gateway WebSocket URL comes from ``GET /gateway/bot`` there
    discord_api_base_url: str = Field(default=DEFAULT_API_BASE_URL, alias="DISCORD_API_BASE_URL")

    @field_validator("discord_api_base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")
