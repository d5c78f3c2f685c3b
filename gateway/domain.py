"""Frozen domain values that cross every boundary: keys, envelopes, targets, replies.

Nothing raw from a platform passes an adapter: adapters build these values, the core and the
store only ever see them. Each value that is stored is rebuilt from its row in one ``from_*``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionKey:
    """Where a conversation lives: one session per key is active at a time.

    ``scope`` makes ``chat_id`` unique on its platform (Slack team id, Telegram bot or
    business connection, Mattermost server). ``thread_id`` is ``None`` for a place without
    threads (a DM, Telegram's General topic, a non-forum group).
    """

    platform: str
    scope: str
    chat_id: str
    thread_id: str | None = None

    def __str__(self) -> str:
        return f"{self.platform}:{self.scope}:{self.chat_id}:{self.thread_id or '-'}"

    @classmethod
    def parse(cls, text: str) -> SessionKey:
        """Inverse of ``str()``: ``platform:scope:chat:thread`` (``-`` = no thread)."""
        # the scope may itself contain ':' (a Mattermost server "host:8065"); platform, chat
        # and thread never do
        platform, _, rest = text.partition(":")
        parts = rest.rsplit(":", 2)
        if not platform or len(parts) != 3 or not all(parts[:2]):
            raise ValueError(f"not a session key (platform:scope:chat:thread): {text!r}")
        scope, chat_id, thread = parts
        return cls(
            platform=platform,
            scope=scope,
            chat_id=chat_id,
            thread_id=None if thread in ("", "-") else thread,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyTarget:
    """Everything delivery needs to land in the same place, computed once at ingest.

    ``thread_id`` is the thread *as the platform wants it on send*: the Telegram topic id or
    ``None`` (General, non-forum groups, private chats), the Slack root ``thread_ts``, the
    Mattermost root post id. ``extra`` carries platform routing fields that must travel with
    the reply (Telegram ``business_connection_id``, ``direct_messages_topic_id``).
    Delivery reads the stored target and never re-derives it.
    """

    platform: str
    scope: str
    chat_id: str
    thread_id: str | None = None
    reply_to_message_id: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "scope": self.scope,
            "chat_id": self.chat_id,
            "thread_id": self.thread_id,
            "reply_to_message_id": self.reply_to_message_id,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> ReplyTarget:
        if isinstance(data, str):
            data = json.loads(data)
        assert not isinstance(data, str)
        return cls(
            platform=str(data["platform"]),
            scope=str(data["scope"]),
            chat_id=str(data["chat_id"]),
            thread_id=None if data.get("thread_id") is None else str(data["thread_id"]),
            reply_to_message_id=(
                None
                if data.get("reply_to_message_id") is None
                else str(data["reply_to_message_id"])
            ),
            extra={str(k): str(v) for k, v in (data.get("extra") or {}).items()},
        )


class Trigger(enum.Enum):
    """Whether an inbound message asks for an answer.

    ``ALWAYS``: a DM, a mention, a reply to the bot, a command. ``IF_FOLLOWING``: answer only
    if the bot already answered in this session (thread follow-ups without a mention).
    ``NEVER``: stored as context only.
    """

    ALWAYS = "always"
    IF_FOLLOWING = "if_following"
    NEVER = "never"


class EventKind(enum.Enum):
    MESSAGE = "message"
    EDIT = "edit"
    DELETE = "delete"


@dataclass(frozen=True, slots=True, kw_only=True)
class Sender:
    id: str
    name: str | None = None
    is_bot: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Attachment:
    kind: str
    name: str | None = None
    url: str | None = None
    mime_type: str | None = None
    size: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """One inbound message, surface-agnostic.

    ``event_id`` is the platform's delivery id (Telegram update_id, Slack event_id) and
    ``message_id`` the platform's id of the message itself (Telegram chat-local message_id,
    Slack ts, Mattermost post id); the inbox dedupes on both. ``command`` is the bare command
    name (``new``, ``help``) when the text is one addressed to this bot.
    """

    key: SessionKey
    target: ReplyTarget
    message_id: str
    text: str
    sender: Sender
    event_id: str | None = None
    kind: EventKind = EventKind.MESSAGE
    trigger: Trigger = Trigger.ALWAYS
    command: str | None = None
    reply_to_id: str | None = None
    attachments: tuple[Attachment, ...] = ()
    sent_at: datetime | None = None
    backfill: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ignored:
    """An inbound event that is valid but not a conversational message (joins, bot posts...)."""

    platform: str
    reason: str
    event_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """An inbound event that could not be understood; stored as a dead letter with the reason."""

    platform: str
    reason: str
    event_id: str | None = None


Extracted = Envelope | Ignored | Rejected


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One answer produced by an agent or a command, before it is split for a platform."""

    text: str
    model: str | None = None
    tokens_used: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
