"""Microsoft Teams' own settings (``TEAMS_*``), read like the core's (environment, ``.env``)."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from gateway.core.errors import ConfigError
from gateway.core.plugins import SurfaceSettings

#: Bot Framework's published OpenID metadata: the keys inbound activities are signed with
BOT_FRAMEWORK_OPENID = "https://login.botframework.com/v1/.well-known/openidconfiguration"
#: the token endpoint of a multi-tenant bot (a single-tenant one uses its tenant's)
BOT_FRAMEWORK_TOKEN = "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"


class TeamsSettings(SurfaceSettings):
    #: the bot's app registration (Microsoft App ID); set, Teams is on: activities arrive at
    #: `POST /teams/messages`
    teams_app_id: str | None = Field(default=None, alias="TEAMS_APP_ID")
    #: the app registration's client secret
    teams_app_password: SecretStr | None = Field(default=None, alias="TEAMS_APP_PASSWORD")
    #: the tenant of a single-tenant bot (its token endpoint, its issuer); unset: multi-tenant
    teams_tenant_id: str | None = Field(default=None, alias="TEAMS_TENANT_ID")
    #: where inbound activities' signing keys come from (the OpenID metadata document)
    teams_openid_metadata_url: str = Field(
        default=BOT_FRAMEWORK_OPENID, alias="TEAMS_OPENID_METADATA_URL"
    )
    #: where outbound tokens come from (client credentials); unset: the tenant's token endpoint
    #: (`botframework.com` for a multi-tenant bot)
    teams_token_url: str | None = Field(default=None, alias="TEAMS_TOKEN_URL")

    @model_validator(mode="after")
    def _contradictions(self) -> TeamsSettings:
        if self.teams_app_id is not None and not self.teams_app_id.strip():
            raise ConfigError("TEAMS_APP_ID", "must not be empty")
        if self.teams_app_id and self.teams_app_password is None:
            raise ConfigError("TEAMS_APP_PASSWORD", "required when TEAMS_APP_ID is set")
        if self.teams_app_password is not None and not self.teams_app_id:
            raise ConfigError("TEAMS_APP_ID", "required when TEAMS_APP_PASSWORD is set")
        for name, url in (
            ("TEAMS_OPENID_METADATA_URL", self.teams_openid_metadata_url),
            ("TEAMS_TOKEN_URL", self.teams_token_url),
        ):
            if url is not None and not url.startswith(("https://", "http://")):
                raise ConfigError(name, "must be an http(s) URL")
        return self

    def token_url(self) -> str:
        """``TEAMS_TOKEN_URL``, else the tenant's token endpoint."""
        if self.teams_token_url:
            return self.teams_token_url
        if self.teams_tenant_id:
            return f"https://login.microsoftonline.com/{self.teams_tenant_id}/oauth2/v2.0/token"
        return BOT_FRAMEWORK_TOKEN
