"""The built-in web chat surface (platform ``web``)."""

from __future__ import annotations

from adapters.web.adapter import WebAdapter
from gateway.errors import ConfigError
from gateway.ports import AdapterContext, PlatformAdapter
from gateway.settings import Settings

__all__ = ["WebAdapter", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    if context.identity is None:
        raise ConfigError("GATEWAY_WEB_AUTH", "the web chat needs an identity provider")
    return WebAdapter(context.conversations, context.live, context.identity)
