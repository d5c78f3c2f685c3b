"""How a Mattermost adapter is configured: the server, the token, and the
timings and limits of its event stream and reconciliation."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from adapters.mattermost.api import PER_PAGE_MAX, SINCE_LIMIT
from adapters.mattermost.settings import MattermostSettings
from adapters.mattermost.websocket import Backoff
from gateway.core.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class MattermostConfig:
    url: str
    token: str = field(repr=False)
    #: trust store for https:// servers; None = the system's (honours SSL_CERT_FILE)
    ssl_context: ssl.SSLContext | None = None
    backoff: Backoff = field(default_factory=Backoff)
    http_timeout: float = 30.0
    hello_timeout: float = 30.0
    #: how often the read loop, when idle, looks for posts whose handling failed (a tick
    #: with nothing held costs nothing; their retries have their own backoff, ``_on_tick``)
    tick_interval: float = 1.0
    #: store/REST calls at once while reconciling after a (re)connect (across channels and
    #: conversations; each conversation's posts are still submitted in order)
    reconcile_concurrency: int = 8
    #: how long stop() waits for the event in hand before cancelling the stream
    stop_timeout: float = 10.0
    #: honour HTTP(S)_PROXY / NO_PROXY from the environment (REST and websocket)
    trust_env: bool = True
    #: the gateway's ``POST /mattermost/actions`` as the server reaches it (approval buttons)
    actions_url: str | None = None
    #: a since-query answering this many posts may have left some out (the server's cap):
    #: the channel is then read page by page back to its cursor as well
    since_limit: int = SINCE_LIMIT
    #: that paging: posts per page, and at most this many pages per channel and reconciliation
    page_size: int = PER_PAGE_MAX
    max_pages: int = 100

    @classmethod
    def from_settings(
        cls,
        settings: MattermostSettings,
    ) -> MattermostConfig:
        if not settings.mattermost_url or settings.mattermost_token is None:
            raise ConfigError(
                "MATTERMOST_URL", "Mattermost needs MATTERMOST_URL and MATTERMOST_TOKEN"
            )
        return cls(
            url=settings.mattermost_url,
            token=settings.mattermost_token.get_secret_value(),
            actions_url=settings.mattermost_actions_url,
        )
