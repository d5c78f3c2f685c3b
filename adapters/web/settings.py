"""The web chat's own settings (``WEB_*``); it is switched on by the core's GATEWAY_WEB_CHAT."""

from __future__ import annotations

from pydantic import Field

from gateway.core.plugins import SurfaceSettings


class WebSettings(SurfaceSettings):
    #: override of GATEWAY_STREAMING for the web chat (unset: follow it)
    web_streaming: bool | None = Field(default=None, alias="WEB_STREAMING")

    def streaming(self) -> bool | None:
        return self.web_streaming
