"""Value types the store persists and every layer shares: where a conversation lives
(``SessionKey``), where its replies go (``ReplyTarget``), and the states of stored rows.

This module imports nothing of ours but the row reader (``session_store.rows``, which imports
nothing), so the store can own it and the core and the adapters can use it (``gateway.core.domain``
re-exports the keys). Each value read from a row is built by that reader or ``from_json``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, get_args

from session_store.rows import reader

#: a written id's escapes: ``%`` first, so an escape is never escaped twice
_ESCAPES = (("%", "%25"), (":", "%3A"))
_DECODED = {"3A": ":", "25": "%", "2D": "-"}
_ESCAPED = re.compile(r"%(3[Aa]|25|2[Dd])")


def escape_part(text: str, *, colon: bool = True) -> str:
    """``text`` as one ``:``-separated part of a written key or place: ``%`` as ``%25`` and
    (unless ``colon`` is false: a key's scope keeps its ``:``) ``:`` as ``%3A``. Text
    without either is written as it is, so every key of the ids that hold neither (Slack,
    Telegram, Mattermost, the web chat) reads as it always did; Matrix room ids
    (``!opaque:server``) and Teams conversation ids (``19:abc@thread.tacv2``) do hold ``:``."""
    for raw, escaped in _ESCAPES:
        if raw != ":" or colon:
            text = text.replace(raw, escaped)
    return text


def unescape_part(text: str) -> str:
    """Inverse of ``escape_part``: ``%3A`` (or ``%3a``) is ``:``, ``%25`` is ``%``, and ``%2D``
    is ``-`` (a thread whose id is ``-``: a bare ``-`` is no thread). Nothing else is decoded
    (``%0E`` or ``%00`` stays as written: a written key never brings a control character in)."""
    if "%" not in text:
        return text
    return _ESCAPED.sub(lambda m: _DECODED[m.group(1).upper()], text)


class EncodedJson(dict):  # type: ignore[type-arg]
    """A JSON object stored as jsonb whose encoding was made already (the inbox measures a raw
    payload's size by encoding it): the connection's codec sends ``text`` as it is instead of
    encoding the object a second time. ``text`` must be the JSON of the object's items."""

    __slots__ = ("text",)

    def __init__(self, items: Mapping[str, Any], text: str) -> None:
        super().__init__(items)
        self.text = text


#: a session: open for new messages, or closed by ``/new`` (or an operator)
SessionStatus = Literal["active", "paused", "closed", "archived"]
#: what a message is; a person's text is ``chat``, the bot's answers ``answer``, tool results
#: ``tool_result``
MessageKind = Literal[
    "chat",
    "proposal",
    "review",
    "decision",
    "summary",
    "question",
    "answer",
    "warning",
    "tool_result",
]
MESSAGE_KINDS: tuple[MessageKind, ...] = get_args(MessageKind)
#: what a stored message may be besides: a rolling summary kept in the transcript, written
#: only by the store with the summary (never by a caller)
StoredKind = MessageKind | Literal["rolling"]
#: who wrote a message
Role = Literal["user", "assistant", "system", "tool"]
#: an outbox row: waiting, claimed by a sender, delivered, or given up (visibly)
DeliveryStatus = Literal["pending", "sending", "sent", "failed"]
#: what ingest did with one inbound event
IngestStatus = Literal["accepted", "duplicate", "ignored", "rejected"]
#: an inbox row (a duplicate is never stored)
InboundStatus = Literal["accepted", "ignored", "rejected"]
#: whether a stored user message asked for an answer (``answer``) or is context only
MessageTrigger = Literal["answer", "context"]
#: does an inbound message ask for a turn: always, only if the session is engaged (the bot
#: was addressed there before: a thread follow-up without a mention), or never (context only).
#: The core decides which (``gateway.inbound.policy``); the store applies it atomically with
#: the session row (``queries.INGEST_MESSAGE``).
TurnRequest = Literal["always", "if_answered", "never"]


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
        if not self.thread_id:
            thread = "-"
        elif self.thread_id == "-":
            # a thread whose id is ``-`` itself: a bare ``-`` is no thread
            thread = "%2D"
        else:
            thread = escape_part(self.thread_id)
        return f"{self.chat_text}:{thread}"

    @property
    def chat_text(self) -> str:
        """``platform:scope:chat``, written as in ``str()``: the chat, every thread."""
        platform, scope = escape_part(self.platform), escape_part(self.scope, colon=False)
        return f"{platform}:{scope}:{escape_part(self.chat_id)}"

    @property
    def place_text(self) -> str:
        """The key as a place (``gateway schedules add --place``): the chat (``chat_text``)
        and its thread if any. A scope that holds ``:`` (a server ``host:8448``) keeps the
        thread part (``-`` for none), so the place reads back as this key."""
        if self.thread_id is None and ":" not in self.scope:
            return self.chat_text
        return str(self)

    @classmethod
    def parse(cls, text: str) -> SessionKey:
        """Inverse of ``str()``: ``platform:scope:chat:thread`` (``-`` = no thread).

        The platform, chat and thread are written with ``%`` as ``%25`` and ``:`` as ``%3A``
        (``escape_part``), so only the scope may hold a bare ``:`` (a Mattermost server
        ``host:8065``, a Matrix homeserver ``example.org:8448``); ``%3A`` in a scope is read
        as ``:`` too. A key without ``%`` reads exactly as written."""
        platform, _, rest = text.partition(":")
        parts = rest.rsplit(":", 2)
        if not platform or len(parts) != 3 or not all(parts[:2]):
            raise ValueError(f"not a session key (platform:scope:chat:thread): {text!r}")
        scope, chat_id, thread = parts
        return cls(
            platform=unescape_part(platform),
            scope=unescape_part(scope),
            chat_id=unescape_part(chat_id),
            thread_id=None if thread in ("", "-") else unescape_part(thread),
        )


def split_account(account: str) -> tuple[str, str, str]:
    """An account ``platform:scope:sender`` split back into its parts.

    Every writer joins an account unescaped (Python and SQL: ``platform || ':' || scope ||
    ':' || sender_id``), and the stored accounts stay as they are; only reading one back
    needs care. The platform never holds ``:``. A scope may (a Mattermost or Matrix server
    ``host:8448``), and so may a sender (a Matrix user ``@ann:example.org``, a Teams channel
    account ``29:1a2b``), never both on one platform but Matrix:

    * Matrix: a user id begins with ``@`` and a server's host holds none, so the sender
      begins at the first ``:@`` (``matrix:example.org:8448:@ann:example.org:8448``);
    * Teams: the scope is a tenant id, which holds no ``:``; the sender is all after it;
    * every other platform: the sender holds no ``:``; it is all after the last one.

    ``ValueError`` for text with fewer than three parts."""
    platform, _, rest = account.partition(":")
    at = rest.find(":@") if platform == "matrix" else -1
    if at > 0:
        scope, sender = rest[:at], rest[at + 1 :]
    elif platform == "teams":
        scope, _, sender = rest.partition(":")
    else:
        scope, _, sender = rest.rpartition(":")
    if not (platform and scope and sender):
        raise ValueError(f"not an account (platform:scope:user_id): {account!r}")
    return platform, scope, sender


#: the key columns of a ``sessions`` row (``platform, scope, chat_id, thread_id``)
key_from_row = reader(SessionKey)


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


#: a tool approval request's state
ApprovalStatus = Literal["pending", "approved", "denied", "expired"]


class StoredPart(NamedTuple):
    """One outbox part as its row's columns (migration 0016; ``gateway.core.parts`` builds
    and reads them): its kind, its text (a file's caption), its typed fields as a versioned
    JSON document, a file's bytes."""

    kind: str
    content: str
    part: Mapping[str, Any]
    data: bytes | None = None


def as_stored(part: StoredPart | str) -> StoredPart:
    """A plain string is a text part."""
    return StoredPart("text", part, {"v": 1}) if isinstance(part, str) else part
