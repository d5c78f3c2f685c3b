"""Frozen domain values that cross every boundary: keys, envelopes, targets, replies.

Nothing raw from a platform passes an adapter: adapters build these values, the core and the
store only ever see them. Each value that is stored is rebuilt from its row in one ``from_*``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

# the keys are persisted values the store owns (``session_store.values``); every layer above
# imports them from here
from session_store.values import (
    ReplyTarget,
    SessionKey,
    escape_part,
    split_account,
    unescape_part,
)

__all__ = [
    "PLACE_KEY",
    "Attachment",
    "Envelope",
    "EventKind",
    "Extracted",
    "Facts",
    "Ignored",
    "OutgoingFile",
    "Place",
    "Reaction",
    "Rejected",
    "Reply",
    "ReplyTarget",
    "Sender",
    "SessionKey",
    "Trigger",
    "escape_part",
    "split_account",
    "unescape_part",
]


class Trigger(enum.Enum):
    """Whether an inbound message asks for an answer.

    ``ALWAYS``: a DM, a mention, a reply to the bot, a command. ``IF_FOLLOWING``: answer only
    if the session is engaged, i.e. the bot was addressed there before (thread follow-ups
    without a mention). ``NEVER``: stored as context only. ``gateway.inbound.policy`` decides.
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


#: the key of a message's metadata the core stores its ``Place`` under
PLACE_KEY = "place"


@dataclass(frozen=True, slots=True, kw_only=True)
class Place:
    """Where a message was posted, in words the core can use without knowing the platform:
    a direct conversation with one person or not, the chat's name (a group title, a channel
    name) and the thread's name (a forum topic's name) where the platform gives them.

    Each platform's extract fills it; the core stores it with the message (``as_json``) and
    the context code reads it back (``from_json``), never the platform's own fields."""

    direct: bool = False
    chat_name: str | None = None
    thread_name: str | None = None

    def as_json(self) -> dict[str, Any]:
        stored: dict[str, Any] = {"direct": self.direct}
        if self.chat_name:
            stored["chat_name"] = self.chat_name
        if self.thread_name:
            stored["thread_name"] = self.thread_name
        return stored

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> Place:
        chat_name, thread_name = stored.get("chat_name"), stored.get("thread_name")
        return cls(
            direct=stored.get("direct") is True,
            chat_name=chat_name if isinstance(chat_name, str) and chat_name else None,
            thread_name=thread_name if isinstance(thread_name, str) and thread_name else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Facts:
    """What an adapter saw about one inbound message; nothing in it is decided: the answer
    policy (``gateway.inbound.policy``) decides from it, for every platform alike.

    ``place`` is the message's session key (platform, scope, chat, thread); ``person`` the
    sender's platform id (``None`` when the platform does not say: a deletion)."""

    place: SessionKey
    person: str | None
    #: a one-to-one conversation with the bot
    direct: bool = False
    #: the bot is named in it (``@bot``, ``<@U…>``, Slack's ``app_mention``)
    mentioned: bool = False
    #: a reply to one of the bot's own messages (Telegram's reply chains)
    reply_to_bot: bool = False
    #: a command addressed to the bot (``/new``, ``/new@ThisBot``)
    command: bool = False
    #: a reply inside a thread (Slack ``thread_ts``, Mattermost ``root_id``)
    thread_reply: bool = False
    #: written by a bot account
    from_bot: bool = False
    #: written by this bot itself
    from_self: bool = False
    #: posted by the platform on someone's behalf (Telegram's automatic forward)
    automatic: bool = False
    #: it carries text or a file (Telegram service-like messages carry neither)
    content: bool = True


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
    place: Place = Place()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: what the adapter saw; the core's ingress decides ``trigger`` (and whether ``command``
    #: counts) from it, whatever the adapter set (``None``: only what the envelope itself
    #: says: the sender, and whether the place is direct)
    facts: Facts | None = None
    #: set by the core's door, never by an adapter: the place's burst window (its profile's
    #: ``burst_seconds``); the turn this message asks for waits until the thread was quiet
    #: that long
    burst_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Ignored:
    """An inbound event that is valid but not a conversational message (joins, bot posts...).

    ``facts``: what the adapter saw of a message it set aside for its shape (a system post,
    an edit that changed nothing): the answer policy still reads them, and its refusal (the
    bot's own message, a place outside the allow-list) is the reason kept. ``kind``: what the
    event was (an edit, a deletion)."""

    platform: str
    reason: str
    event_id: str | None = None
    facts: Facts | None = None
    kind: EventKind = EventKind.MESSAGE


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """An inbound event that could not be understood; stored as a dead letter with the reason."""

    platform: str
    reason: str
    event_id: str | None = None


Extracted = Envelope | Ignored | Rejected


@dataclass(frozen=True, slots=True, kw_only=True)
class Reaction:
    """A thumbs up/down on a message, as feedback: ``value`` is +1, -1, or 0 (taken back).
    ``message_id`` is the platform's id of the message reacted to (Telegram message_id, Slack
    ts, Mattermost post id); the core records it only when that message is one of ours."""

    chat_id: str
    message_id: str
    user_id: str
    value: int
    #: a stop reaction (⏹) on the bot's answer: stop it if it is being written (``/stop``),
    #: not feedback
    stop: bool = False


#: the emoji name a stop reaction has on Slack and Mattermost (⏹)
STOP_EMOJI = "black_square_for_stop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One answer produced by an agent or a command, before it is split for a platform."""

    text: str
    model: str | None = None
    tokens_used: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: images and files that go out with the answer, each as an upload into the same thread
    #: (an outbox part of its own, after the text; ``gateway.outbox.files``)
    files: tuple[OutgoingFile, ...] = ()
    #: part of a turn's tool exchange: an assistant message with tool calls (``assistant``)
    #: or a tool result (``tool``), stored in the transcript, never delivered
    exchange_role: Literal["assistant", "tool"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutgoingFile:
    """A file an answer carries: uploaded into the thread (Telegram sendPhoto/sendDocument,
    Slack files.uploadV2, a Mattermost file post, inline in the web chat)."""

    name: str
    mime_type: str
    data: bytes
    caption: str | None = None

    @property
    def is_image(self) -> bool:
        """Shown as a picture where the platform has one (Telegram sendPhoto)."""
        return self.mime_type in ("image/png", "image/jpeg", "image/webp")
