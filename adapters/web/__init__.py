"""The built-in web chat surface (platform ``web``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.web.plugin import plugin
from adapters.web.settings import WebSettings
from gateway.core.plugins import lazy_attributes
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

if TYPE_CHECKING:
    from adapters.web.adapter import WebAdapter


__all__ = ["WebAdapter", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    """The adapter as a ``module:factory`` (GATEWAY_ADAPTERS style); the core builds it through
    its plugin (``adapters.web.plugin``). No I/O until ``start``."""
    return plugin.create(settings.surface(WebSettings), settings, context)


__getattr__ = lazy_attributes(__name__, {"WebAdapter": "adapters.web.adapter"})
