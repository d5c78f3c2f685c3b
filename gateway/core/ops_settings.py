"""Who may use the operator pages (``/ops``) and the admin API (``/api/v1``): the admin token
alone, or single sign-on with the web chat's OpenID Connect provider and a role per person
(``gateway.http.opsauth``). ``Settings`` inherits them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode

from gateway.core.errors import ConfigError
from gateway.core.settings_groups import SETTINGS_SOURCES

_Names = Annotated[list[str], NoDecode]


class OpsAccessSettings(BaseSettings):
    """Operator access."""

    model_config = SETTINGS_SOURCES

    # --- operator access (gateway/http/opsauth.py) --------------------------------------
    #: who may use `/ops` and the admin API: `token` (GATEWAY_ADMIN_TOKEN, or loopback
    #: without one), or `oidc`: people sign in at `/ops/login` with the GATEWAY_OIDC_*
    #: provider and act with their role (viewer, operator, admin); the admin token keeps
    #: working beside it for scripts
    gateway_ops_auth: Literal["token", "oidc"] = Field(default="token", alias="GATEWAY_OPS_AUTH")
    #: for `GATEWAY_OPS_AUTH=oidc`: an ID-token claim whose values (a string or a list) name
    #: roles: `viewer`, `operator`, `admin`; the highest one found counts
    gateway_ops_roles_claim: str | None = Field(default=None, alias="GATEWAY_OPS_ROLES_CLAIM")
    #: for `GATEWAY_OPS_AUTH=oidc`: people with the admin role (erase, people, budgets, and
    #: everything below), by verified e-mail or by the provider's subject
    gateway_ops_admins: _Names = Field(default_factory=list, alias="GATEWAY_OPS_ADMINS")
    #: for `GATEWAY_OPS_AUTH=oidc`: people with the operator role (approve, reload, retry,
    #: schedules, knowledge base, and reading), by verified e-mail or subject
    gateway_ops_operators: _Names = Field(default_factory=list, alias="GATEWAY_OPS_OPERATORS")
    #: for `GATEWAY_OPS_AUTH=oidc`: people with the viewer role (reading only), by verified
    #: e-mail or subject
    gateway_ops_viewers: _Names = Field(default_factory=list, alias="GATEWAY_OPS_VIEWERS")

    @field_validator(
        "gateway_ops_admins", "gateway_ops_operators", "gateway_ops_viewers", mode="before"
    )
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("gateway_ops_roles_claim")
    @classmethod
    def _claim(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    def check_provider(self, settings: Any) -> None:
        """``GATEWAY_OPS_AUTH=oidc`` needs the provider (the web chat's ``GATEWAY_OIDC_*``
        settings, read from ``settings``), the address to come back to, and a rule giving
        someone a role (without one every sign-in would be refused)."""
        if self.gateway_ops_auth != "oidc":
            return
        for name, field, what in (
            ("GATEWAY_OIDC_ISSUER", "gateway_oidc_issuer", "the provider's issuer URL"),
            ("GATEWAY_OIDC_CLIENT_ID", "gateway_oidc_client_id", "the client id"),
            ("GATEWAY_PUBLIC_URL", "gateway_public_url", "<this>/ops/login/callback comes back"),
        ):
            if not getattr(settings, field):
                raise ConfigError(name, f"required when GATEWAY_OPS_AUTH=oidc ({what})")
        if not (
            self.gateway_ops_roles_claim
            or self.gateway_ops_admins
            or self.gateway_ops_operators
            or self.gateway_ops_viewers
        ):
            raise ConfigError(
                "GATEWAY_OPS_ROLES_CLAIM",
                "GATEWAY_OPS_AUTH=oidc needs GATEWAY_OPS_ROLES_CLAIM or one of "
                "GATEWAY_OPS_ADMINS, GATEWAY_OPS_OPERATORS, GATEWAY_OPS_VIEWERS (who has "
                "which role; a person with none is refused)",
            )
