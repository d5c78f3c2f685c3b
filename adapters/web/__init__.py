"""The built-in web chat surface (platform ``web``)."""

from __future__ import annotations

import re

from adapters.web.adapter import WebAdapter
from gateway.errors import ConfigError
from gateway.ports import AdapterContext, PlatformAdapter
from gateway.settings import Settings

__all__ = ["WebAdapter", "create_adapter"]

#: the 📎 upload route: its body is the file (up to GATEWAY_MAX_FILE_BYTES)
UPLOAD_PATH = re.compile(r"/web/api/channels/[^/]+/threads/[^/]+/files")


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    if context.identity is None:
        raise ConfigError("GATEWAY_WEB_AUTH", "the web chat needs an identity provider")
    if context.files is not None and context.http_policy is not None:
        context.http_policy.allow_upload(UPLOAD_PATH, settings.gateway_max_file_bytes)
    return WebAdapter(
        context.conversations,
        context.live,
        context.identity,
        files=context.files,
        echo_agent=settings.agent == "echo",
    )
