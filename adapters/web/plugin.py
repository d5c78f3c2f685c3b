"""The web chat as a surface plugin: switched on by GATEWAY_WEB_CHAT, built even beside the
surfaces a caller hands the gateway."""

from __future__ import annotations

import re

from adapters.web.settings import WebSettings
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import ConfigError
from gateway.core.plugins import SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

#: the 📎 upload route: its body is the file (up to GATEWAY_MAX_FILE_BYTES)
UPLOAD_PATH = re.compile(r"/web/api/channels/[^/]+/threads/[^/]+/files")


class WebPlugin(SurfacePlugin[WebSettings]):
    name = "web"
    settings_class = WebSettings
    enabling_setting = "GATEWAY_WEB_CHAT"
    always = True
    #: no allow-lists: who may post is the web chat's sign-in's (``gateway.http.webauth``)
    core_answer_settings = False

    def enabled(self, settings: WebSettings, core: Settings) -> bool:
        return core.gateway_web_chat

    def create(
        self, settings: WebSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # the platform's client library only when a gateway builds the adapter
        from adapters.web.adapter import WebAdapter

        if context.identity is None:
            raise ConfigError("GATEWAY_WEB_AUTH", "the web chat needs an identity provider")
        if context.files is not None and context.http_policy is not None:
            context.http_policy.allow_upload(UPLOAD_PATH, core.gateway_max_file_bytes)
        return WebAdapter(
            context.conversations,
            context.live,
            context.identity,
            files=context.files,
            held=context.held_files,
            echo_agent=core.agent == "echo",
        )

    def place_target(self, key: SessionKey) -> ReplyTarget:
        """A web chat thread of a channel (the thread the place names)."""
        return ReplyTarget(
            platform=key.platform, scope=key.scope, chat_id=key.chat_id, thread_id=key.thread_id
        )


plugin = WebPlugin()
