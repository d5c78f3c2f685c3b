"""Slack: Events API (``POST /slack/events``) and Socket Mode in, on slack-bolt;
``chat.postMessage`` out.

Threads are sessions: ``SessionKey("slack", team_id, channel, thread root ts)``; a top-level DM
message belongs to the DM itself. ``extract.route`` holds the one rule; the facts are in
``shared/spec/platforms.md`` §2.

Deliberately not handled (platforms.md §2):

* Interactivity other than the approval and feedback buttons, and slash commands (Socket
  Mode ``interactive`` / ``slash_commands`` envelopes, other ``/slack/interactions``
  payloads), are acked and recorded as ignored; ``/new`` and ``/help`` are plain message text
  after the mention (or in a DM).
* Bolt's ``say``/``respond``, its ``Assistant`` middleware and its OAuth flow: ingress only
  runs on bolt; replies go through ``SlackTransport`` and the outbox. Assistant threads are
  handled here (``assistant.py``: suggested prompts, title; the status is ``typing``), answers
  stream with slack_sdk's ``chat_stream`` where Slack allows it (``streams.py``), else by
  ``chat.update`` edits. ``assistant_thread_context_changed`` is not subscribed.
* ``reply_broadcast`` on our own replies.
* One bot token = one workspace identity. Events carrying another ``team_id`` (org-wide
  installs) get their own sessions, but mentions are recognised by this token's bot user only.
* Files shared with a question are downloaded from ``url_private`` with the bot token (only
  from Slack's own hosts) into the thread's knowledge base.
* Ambiguous sends (timeout after the request left) are reported, not reconciled; each post
  carries its idempotency key in message ``metadata`` so an operator or a later reconciler can
  find it with ``conversations.replies``.
* ``X-Slack-No-Retry`` is never sent: a failed store answers 503 so Slack retries.
* Thread history on first contact needs the ``*:history`` scopes; without them (or when the
  fetch exceeds its 1.5 s budget) the mention is stored without the backfill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.slack.plugin import plugin
from adapters.slack.settings import SlackSettings
from gateway.core.plugins import lazy_attributes
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

if TYPE_CHECKING:
    from adapters.slack.adapter import SlackAdapter


__all__ = ["SlackAdapter", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    """The adapter as a ``module:factory`` (GATEWAY_ADAPTERS style); the core builds it through
    its plugin (``adapters.slack.plugin``). No I/O until ``start``."""
    return plugin.create(settings.surface(SlackSettings), settings, context)


__getattr__ = lazy_attributes(__name__, {"SlackAdapter": "adapters.slack.adapter"})
