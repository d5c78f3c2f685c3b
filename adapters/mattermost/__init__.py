"""Mattermost: websocket events, root-id threads, REST reconciliation after reconnects.

Layout: ``urls`` (MATTERMOST_URL -> scope, REST base, websocket URL), ``extract`` (pure
payload -> Envelope | Ignored | Rejected), ``websocket`` (our own event-stream client),
``api`` (the few REST calls, httpx), ``transport`` (delivery), ``actions`` (approval buttons'
signed context), ``adapter`` (wiring, cursors, reconciliation, ``POST /mattermost/actions``).

Deliberately not handled (platforms.md §3):

* Websocket resume (``connection_id``/``sequence_number``, "reliable websockets"): whether the
  server replays is unverified; every (re)connect is followed by a REST reconciliation
  instead, and a ``seq`` gap is only logged.
* CRT ``thread_updated`` and other per-user events: replies still arrive as ``posted``.
* ``GET /channels/{id}/posts?since=`` returns at most 1000 posts: a single channel with more
  posts than that during one disconnection loses the oldest of them.
* Pins, interactive messages other than approval cards' buttons (``actions``; only with
  ``MATTERMOST_ACTIONS_URL``), Mattermost's own slash commands (type ``@bot /new`` or
  `` /new`` with a leading space in channels).
* Servers still on the old 4000-rune post limit (``PostMessageMaxRunesV1``): longer parts
  fail permanently with ``model.post.is_valid.msg.app_error``.
* ``pending_post_id`` dedupes for 30 s on the server: a retry of an ambiguous send later
  than that (long backoff, restart) can post twice.
* Group DMs (``G``) follow channel rules for triggers (mentions / followed threads), not
  "answer everything" like 1:1 DMs, because several people talk there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.mattermost.plugin import plugin
from adapters.mattermost.settings import MattermostSettings
from gateway.core.plugins import lazy_attributes
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

if TYPE_CHECKING:
    from adapters.mattermost.adapter import MattermostAdapter, MattermostConfig


__all__ = ["MattermostAdapter", "MattermostConfig", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    """The adapter as a ``module:factory`` (GATEWAY_ADAPTERS style); the core builds it through
    its plugin (``adapters.mattermost.plugin``). No I/O until ``start``."""
    return plugin.create(settings.surface(MattermostSettings), settings, context)


__getattr__ = lazy_attributes(
    __name__,
    {
        "MattermostAdapter": "adapters.mattermost.adapter",
        "MattermostConfig": "adapters.mattermost.adapter",
    },
)
