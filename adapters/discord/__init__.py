"""Discord: the gateway WebSocket (hikari), threads on messages, REST catch-up after a new
session.

Layout: ``settings`` (DISCORD_*), ``api`` (the REST calls we make, httpx: 429s become the
core's retry), ``extract`` (pure payload -> Envelope | Ignored | Rejected), ``transport``
(delivery, previews, approval cards with buttons), ``reconcile`` (channel cursors and the
history catch-up), ``check`` (doctor/setup, the message-content intent), ``adapter``
(wiring: hikari's gateway connection, the ordered event queue, interactions).

Sessions (platforms.md "Discord"): a channel message is the root of its own thread (the
thread Discord starts on a message has the message's id), so its session is
``(guild, channel, message id)`` and the answer creates that thread on first send; a message
in a thread, or a forum post, is that thread's session ``(guild, parent, thread)``; a DM is
one session per DM channel, answered in the DM.

Deliberately not handled: voice, slash commands (type ``@bot /new``), reactions as feedback,
edits and deletions of messages older than a channel's cursor made while no session was up
(the history catch-up sees only newer messages), private threads the bot was never added to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.discord.plugin import plugin
from adapters.discord.settings import DiscordSettings
from gateway.core.plugins import lazy_attributes
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

if TYPE_CHECKING:
    from adapters.discord.adapter import DiscordAdapter, DiscordConfig

__all__ = ["DiscordAdapter", "DiscordConfig", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    """The adapter as a ``module:factory`` (GATEWAY_ADAPTERS style). No I/O until ``start``."""
    return plugin.create(settings.surface(DiscordSettings), settings, context)


__getattr__ = lazy_attributes(
    __name__,
    {"DiscordAdapter": "adapters.discord.adapter", "DiscordConfig": "adapters.discord.adapter"},
)
