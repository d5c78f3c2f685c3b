"""Matrix's own settings (``MATRIX_*``), read like the core's (environment, ``.env``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.core.errors import ConfigError
from gateway.core.plugins import SurfaceSettings


class MatrixSettings(SurfaceSettings):
    #: the homeserver's client-server API base; set, Matrix is on
    matrix_homeserver_url: str | None = Field(default=None, alias="MATRIX_HOMESERVER_URL")
    #: the bot account's access token
    matrix_access_token: SecretStr | None = Field(default=None, alias="MATRIX_ACCESS_TOKEN")
    #: instead of a token: the bot's user id (``@bot:example.org``), signed in at start
    matrix_user_id: str | None = Field(default=None, alias="MATRIX_USER_ID")
    #: instead of a token: the bot account's password, with MATRIX_USER_ID
    matrix_password: SecretStr | None = Field(default=None, alias="MATRIX_PASSWORD")
    #: the bot account's messages per second, across its rooms: Synapse's default
    #: ``rc_message`` (0.2, bursts of 10); raise it once the homeserver exempts the bot
    #: (Synapse's admin API ``override_ratelimit``)
    matrix_messages_per_second: float = Field(
        default=0.2, gt=0, le=1000, alias="MATRIX_MESSAGES_PER_SECOND"
    )

    @field_validator("matrix_homeserver_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _contradictions(self) -> MatrixSettings:
        if not self.matrix_homeserver_url:
            return self
        if self.matrix_access_token is None and not (self.matrix_user_id and self.matrix_password):
            raise ConfigError(
                "MATRIX_ACCESS_TOKEN",
                "required when MATRIX_HOMESERVER_URL is set (or MATRIX_USER_ID and"
                " MATRIX_PASSWORD)",
            )
        if self.matrix_user_id and not self.matrix_user_id.startswith("@"):
            raise ConfigError("MATRIX_USER_ID", "a Matrix user id starts with @ (@bot:example.org)")
        return self


def scope_of(url: str) -> str:
    """The session keys' scope: the homeserver's host (and port), as Mattermost's server."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ConfigError("MATRIX_HOMESERVER_URL", f"no host in {url!r}")
    return parts.netloc.rpartition("@")[2].lower()
