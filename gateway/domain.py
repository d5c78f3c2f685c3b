"""Frozen domain values that cross every boundary: keys, envelopes, targets, replies.

Nothing raw from a platform passes an adapter: adapters build these values, the core and the
store only ever see them. Each value that is stored is rebuilt from its row in one ``from_*``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# the keys are persisted values the store owns (``session_store.values``); every layer above
# imports them from here
from session_store.values import ReplyTarget, SessionKey

__all__ = [
    "Attachment",
    "Envelope",
    "EventKind",
    "Extracted",
    "Ignored",
    "Rejected",
    "Reply",
    "ReplyTarget",
    "Sender",
    "SessionKey",
    "Trigger",
]


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
    #: the platform's id of the file, to fetch it (Telegram file_id, Slack/Mattermost file id)
    file_id: str | None = None


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
