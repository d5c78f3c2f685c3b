"""Who may reach the HTTP server: the checks on the access settings (the admin token, the
web chat's sign-in, trusted proxies, single sign-on), run when the settings are read."""

from __future__ import annotations

import ipaddress
from typing import Any

from gateway.core.errors import ConfigError

# the settings arrive as Any: this module is imported by gateway.core.settings, and naming
# its class here (even for typing only) would be an import cycle


def check_access(settings: Any) -> None:
    """Who may reach the HTTP server: a long admin token, identity off only on loopback."""
    if (token := settings.gateway_admin_token) is not None and len(token.get_secret_value()) < 32:
        raise ConfigError(
            "GATEWAY_ADMIN_TOKEN",
            "must be at least 32 characters (for example `openssl rand -hex 32`)",
        )
    if (
        settings.gateway_web_chat
        and settings.gateway_web_auth == "none"
        and not is_loopback_bind(settings.gateway_http_host)
    ):
        raise ConfigError(
            "GATEWAY_WEB_AUTH",
            f"is none (one local user, no sign-in), which is allowed only on a loopback "
            f"bind, but GATEWAY_HTTP_HOST={settings.gateway_http_host}; set "
            "GATEWAY_WEB_AUTH=accounts, proxy or oidc, or GATEWAY_WEB_CHAT=false",
        )
    for cidr in settings.gateway_trusted_proxies:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise ConfigError(
                "GATEWAY_TRUSTED_PROXIES", f"{cidr!r} is not an address or CIDR"
            ) from None
    if settings.gateway_web_auth == "proxy" and not settings.gateway_trusted_proxies:
        raise ConfigError(
            "GATEWAY_TRUSTED_PROXIES",
            "required when GATEWAY_WEB_AUTH=proxy (the addresses of the reverse proxy)",
        )
    if settings.gateway_web_auth == "oidc":
        _check_oidc(settings)
    settings.ops.check_provider(settings)


def _check_oidc(settings: Any) -> None:
    """Single sign-on needs a provider, a client, an address, and who may use the chat."""
    url_why = "the address people open the chat at (the redirect URI is built from it)"
    for name, value, what in (
        ("GATEWAY_OIDC_ISSUER", settings.gateway_oidc_issuer, "the provider's issuer URL"),
        ("GATEWAY_OIDC_CLIENT_ID", settings.gateway_oidc_client_id, "the client id"),
        ("GATEWAY_PUBLIC_URL", settings.gateway_public_url, url_why),
    ):
        if not value:
            raise ConfigError(name, f"required when GATEWAY_WEB_AUTH=oidc ({what})")
    if not settings.gateway_oidc_allowed_domains and not settings.gateway_oidc_allowed_groups:
        raise ConfigError(
            "GATEWAY_OIDC_ALLOWED_DOMAINS",
            "GATEWAY_WEB_AUTH=oidc needs GATEWAY_OIDC_ALLOWED_DOMAINS or "
            "GATEWAY_OIDC_ALLOWED_GROUPS (who may use the chat; `*` for any verified "
            "e-mail)",
        )
    if "openid" not in settings.gateway_oidc_scopes.split():
        raise ConfigError("GATEWAY_OIDC_SCOPES", "must include openid")
    for domain in settings.gateway_oidc_allowed_domains:
        if domain != "*" and ("@" in domain.lstrip("@") or "." not in domain):
            raise ConfigError("GATEWAY_OIDC_ALLOWED_DOMAINS", f"{domain!r} is not an e-mail domain")


def is_loopback_bind(host: str) -> bool:
    """Whether binding ``host`` serves only this machine (``127.0.0.1``, ``::1``,
    ``localhost``)."""
    name = host.strip().strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False
