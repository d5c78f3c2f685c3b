"""The built-in web chat surface (platform ``web``)."""

from __future__ import annotations

from adapters.web.adapter import WebAdapter
from gateway.ports import AdapterContext, PlatformAdapter
from gateway.settings import Settings

__all__ = ["WebAdapter", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    return WebAdapter(context.conversations, context.live, files=context.files)
