"""Pure extraction: one event of a ``/sync`` room timeline -> Envelope | Ignored | Rejected.

No I/O here. The rules (platforms.md §7):

* Session key ``(homeserver, room_id, thread)``. In a room of more than two people a message
  in a thread (``m.relates_to.rel_type == "m.thread"``) is that thread's session, and a message
  at the top level starts a thread rooted at itself (``thread = its event id``), where its
  answer goes. A two-person room is a direct chat: one session (``thread=None``), answered in
  the room (a thread there is still its own session).
* Edits (``m.replace``) and redactions are the stored message's edit and deletion: annotations,
  never answered; they find the message by its event id in the room, whatever its thread.
* Who is answered is not decided here: ``Facts`` say what the message is (direct, mentioned
  in ``m.mentions`` or by its id in the text, in a thread, the bot's own) and the core's door
  decides.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.core.commands import command_name
from gateway.core.domain import (
    Attachment,
    Envelope,
    EventKind,
    Extracted,
    Facts,
    Ignored,
    Place,
    Rejected,
    ReplyTarget,
    Sender,
    SessionKey,
    Trigger,
)

PLATFORM = "matrix"

#: reactions on an approval card that decide it, and feedback on an answer
APPROVE_KEYS = frozenset({"✅", "✔️"})
DENY_KEYS = frozenset({"❌", "✖️"})
FEEDBACK = {"👍": 1, "👍️": 1, "👎": -1, "👎️": -1}

_FILE_TYPES = {"m.image": "image", "m.file": "file", "m.audio": "audio", "m.video": "video"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RoomFacts:
    """What the adapter knows of a room when one of its events is extracted."""

    room_id: str
    direct: bool
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    scope: str
    bot_user_id: str


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def relation(content: Mapping[str, Any]) -> Mapping[str, Any]:
    rel = content.get("m.relates_to")
    return rel if isinstance(rel, Mapping) else {}


def thread_root(content: Mapping[str, Any]) -> str | None:
    rel = relation(content)
    if rel.get("rel_type") == "m.thread" and isinstance(rel.get("event_id"), str):
        return str(rel["event_id"])
    return None


def mentions_bot(content: Mapping[str, Any], bot_user_id: str) -> bool:
    mentions = content.get("m.mentions")
    if isinstance(mentions, Mapping):
        users = mentions.get("user_ids")
        if isinstance(users, list) and bot_user_id in users:
            return True
    body = _str(content.get("body"))
    formatted = _str(content.get("formatted_body"))
    return bot_user_id in body or f"matrix.to/#/{bot_user_id}" in formatted


def _localpart(user_id: str) -> str:
    return user_id[1:].partition(":")[0]


def parse_command(text: str, bot_user_id: str) -> str | None:
    """``/new`` or ``/help``, optionally after the bot's id or name (``@bot:hs: /new``)."""
    rest = text.strip()
    lead = re.match(
        rf"(?:{re.escape(bot_user_id)}|@?{re.escape(_localpart(bot_user_id))})[:,]?\s+",
        rest,
        re.IGNORECASE,
    )
    if lead:
        rest = rest[lead.end() :]
    return command_name(rest)


def session_key(ctx: Context, room: RoomFacts, event_id: str, root: str | None) -> SessionKey:
    """The one place the Matrix session rule lives."""
    thread = root if room.direct else (root or event_id)
    return SessionKey(platform=PLATFORM, scope=ctx.scope, chat_id=room.room_id, thread_id=thread)


def _sent_at(event: Mapping[str, Any]) -> datetime | None:
    ts = event.get("origin_server_ts")
    if isinstance(ts, int) and not isinstance(ts, bool) and ts > 0:
        try:
            return datetime.fromtimestamp(ts / 1000, tz=UTC)
        except (OverflowError, ValueError, OSError):
            return None
    return None


def _attachments(content: Mapping[str, Any]) -> tuple[Attachment, ...]:
    kind = _FILE_TYPES.get(_str(content.get("msgtype")))
    url = _str(content.get("url"))
    if kind is None or not url.startswith("mxc://"):
        return ()
    info = content.get("info")
    info = info if isinstance(info, Mapping) else {}
    size = info.get("size")
    return (
        Attachment(
            kind=kind,
            name=_str(content.get("filename")) or _str(content.get("body")) or None,
            url=url,
            mime_type=_str(info.get("mimetype")) or None,
            size=size if isinstance(size, int) and not isinstance(size, bool) else None,
            file_id=url,
        ),
    )


def _text(content: Mapping[str, Any]) -> str:
    body = _str(content.get("body"))
    if _FILE_TYPES.get(_str(content.get("msgtype"))):
        # a file's body is its name, unless a caption goes with it (``filename`` set apart)
        filename = _str(content.get("filename"))
        return body if filename and body != filename else ""
    return body


def extract_event(event: Mapping[str, Any], *, ctx: Context, room: RoomFacts) -> Extracted:
    """One timeline event of ``room`` (as ``/sync`` gives it)."""
    event_id = _str(event.get("event_id"))
    kind = _str(event.get("type"))
    sender = _str(event.get("sender"))
    if not event_id or not kind or not sender:
        return Rejected(platform=PLATFORM, reason="event without event_id, type or sender")
    content = event.get("content")
    if not isinstance(content, Mapping):
        return Rejected(platform=PLATFORM, reason=f"{kind} without content", event_id=event_id)
    if kind == "m.room.encrypted":
        return Ignored(
            platform=PLATFORM, reason="encrypted room: not supported, not read", event_id=event_id
        )
    if kind == "m.room.redaction":
        redacts = _str(event.get("redacts")) or _str(content.get("redacts"))
        if not redacts:
            return Rejected(
                platform=PLATFORM, reason="redaction without redacts", event_id=event_id
            )
        return _annotation(
            EventKind.DELETE, ctx, room, event, sender=sender, target=redacts, text=""
        )
    if kind != "m.room.message":
        return Ignored(platform=PLATFORM, reason=f"event {kind}", event_id=event_id)
    if "redacted_because" in (event.get("unsigned") or {}):
        return Ignored(platform=PLATFORM, reason="redacted message", event_id=event_id)
    rel = relation(content)
    if rel.get("rel_type") == "m.replace":
        target = _str(rel.get("event_id"))
        new = content.get("m.new_content")
        if not target or not isinstance(new, Mapping):
            return Rejected(platform=PLATFORM, reason="edit without its target", event_id=event_id)
        return _annotation(
            EventKind.EDIT, ctx, room, event, sender=sender, target=target, text=_text(new)
        )
    root = thread_root(content)
    key = session_key(ctx, room, event_id, root)
    text = _text(content)
    from_self = sender == ctx.bot_user_id
    facts = Facts(
        place=key,
        person=sender,
        direct=room.direct,
        mentioned=mentions_bot(content, ctx.bot_user_id),
        thread_reply=root is not None,
        from_bot=from_self or _str(content.get("msgtype")) == "m.notice",
        from_self=from_self,
    )
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM,
            scope=ctx.scope,
            chat_id=room.room_id,
            thread_id=key.thread_id,
            reply_to_message_id=event_id,
        ),
        message_id=event_id,
        text=text,
        sender=Sender(id=sender, name=_localpart(sender) or None, is_bot=facts.from_bot),
        event_id=event_id,
        command=parse_command(text, ctx.bot_user_id),
        reply_to_id=root,
        attachments=_attachments(content),
        sent_at=_sent_at(event),
        place=Place(direct=room.direct, chat_name=room.name),
        metadata={"source": "sync", **({"thread_root": root} if root else {})},
        facts=facts,
    )


def _annotation(
    kind: EventKind,
    ctx: Context,
    room: RoomFacts,
    event: Mapping[str, Any],
    *,
    sender: str,
    target: str,
    text: str,
) -> Envelope:
    """An edit or a deletion of ``target``: found by its event id in the room."""
    key = session_key(ctx, room, target, None)
    event_id = _str(event.get("event_id"))
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM, scope=ctx.scope, chat_id=room.room_id, thread_id=key.thread_id
        ),
        message_id=target,
        text=text,
        sender=Sender(id=sender, name=_localpart(sender) or None),
        event_id=event_id,
        kind=kind,
        trigger=Trigger.NEVER,
        sent_at=_sent_at(event),
        place=Place(direct=room.direct, chat_name=room.name),
        facts=Facts(
            place=key,
            person=sender,
            direct=room.direct,
            from_self=sender == ctx.bot_user_id,
        ),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactionOf:
    """An ``m.reaction`` (an ``m.annotation`` of another event)."""

    room_id: str
    event_id: str
    user_id: str
    key: str


def reaction_of(event: Mapping[str, Any], room_id: str) -> ReactionOf | None:
    if event.get("type") != "m.reaction":
        return None
    content = event.get("content")
    rel = relation(content) if isinstance(content, Mapping) else {}
    target, key, sender = _str(rel.get("event_id")), _str(rel.get("key")), _str(event.get("sender"))
    if rel.get("rel_type") != "m.annotation" or not target or not key or not sender:
        return None
    return ReactionOf(room_id=room_id, event_id=target, user_id=sender, key=key)
