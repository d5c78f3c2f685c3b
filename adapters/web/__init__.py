"""The built-in web chat surface (platform ``web``)."""

from __future__ import annotations

from adapters.web.adapter import WebAdapter
from adapters.web.plugin import plugin
from adapters.web.settings import WebSettings
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

__all__ = ["WebAdapter", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    """The adapter as a ``module:factory`` (GATEWAY_ADAPTERS style); the core builds it through
    its plugin (``adapters.web.plugin``). No I/O until ``start``."""
    return plugin.create(settings.surface(WebSettings), settings, context)
