"""Pure extraction: a Discord message (gateway dispatch or REST history) -> Envelope |
Ignored | Rejected. No I/O: what the channel is (a DM, a thread and its parent, a forum
post) comes in as a ``Channel`` the adapter looked up.

The rules (platforms.md "Discord"):

* Session key. A DM (type 1) or group DM (3): ``("@me", channel, None)``, answered in the
  DM. A message in a thread (types 10, 11, 12; a forum's posts are threads too):
  ``(guild, parent channel, thread)``. Any other guild channel message: ``(guild, channel,
  message id)``: the thread Discord starts on a message has that message's id, so the answer
  (which starts it, ``transport``) and every later message in it share the key.
* Reply target: ``chat_id`` the parent (or the DM), ``thread_id`` the thread to post into
  (``transport`` creates it on the message when it does not exist yet).
* The same message seen live and in history yields the same ``event_id`` and
  ``message_id``, so the core's inbox keeps one.

Who is answered is not decided here: ``Facts`` say what the message is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
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

PLATFORM = "discord"
#: the scope of DMs (they belong to no guild)
DM_SCOPE = "@me"
#: Discord's epoch (2015-01-01) in ms: a snowflake's time is ``(id >> 22) + EPOCH``
DISCORD_EPOCH_MS = 1_420_070_400_000

DM, GROUP_DM = 1, 3
THREAD_TYPES = frozenset({10, 11, 12})
FORUM = 15
#: message types that are conversation: DEFAULT, REPLY, THREAD_STARTER_MESSAGE
CONVERSATION_TYPES = frozenset({0, 19, 21})
#: the thread name Discord allows at most
THREAD_NAME_MAX = 100

_SNOWFLAKE = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BotIdentity:
    user_id: str
    username: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Channel:
    """What the adapter knows of a channel (``GET /channels/{id}``, THREAD_CREATE,
    GUILD_CREATE)."""

    id: str
    type: int
    guild_id: str | None = None
    parent_id: str | None = None
    name: str | None = None

    @property
    def direct(self) -> bool:
        return self.type in (DM, GROUP_DM)

    @property
    def thread(self) -> bool:
        return self.type in THREAD_TYPES


def channel_of(payload: Mapping[str, Any]) -> Channel | None:
    """A channel object as ``Channel`` (``None``: not one)."""
    cid, kind = payload.get("id"), payload.get("type")
    if not is_snowflake(cid) or not isinstance(kind, int) or isinstance(kind, bool):
        return None
    guild, parent, name = payload.get("guild_id"), payload.get("parent_id"), payload.get("name")
    return Channel(
        id=str(cid),
        type=kind,
        guild_id=str(guild) if is_snowflake(guild) else None,
        parent_id=str(parent) if is_snowflake(parent) else None,
        name=name if isinstance(name, str) and name else None,
    )


def is_snowflake(value: object) -> bool:
    return isinstance(value, str) and bool(_SNOWFLAKE.fullmatch(value))


def snowflake_time(snowflake: str) -> datetime | None:
    try:
        return datetime.fromtimestamp(((int(snowflake) >> 22) + DISCORD_EPOCH_MS) / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _iso(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def session_key(*, channel: Channel, guild_id: str | None, message_id: str) -> SessionKey:
    """The one place the Discord session rule lives (module doc)."""
    if channel.direct:
        return SessionKey(platform=PLATFORM, scope=DM_SCOPE, chat_id=channel.id)
    scope = guild_id or channel.guild_id or DM_SCOPE
    if channel.thread:
        return SessionKey(
            platform=PLATFORM,
            scope=scope,
            chat_id=channel.parent_id or channel.id,
            thread_id=channel.id,
        )
    return SessionKey(platform=PLATFORM, scope=scope, chat_id=channel.id, thread_id=message_id)


def thread_name(text: str) -> str:
    """The name of a thread started on a message: its first line, shortened."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"<@!?\d+>\s*", "", line).strip() or "Conversation"
    return line if len(line) <= THREAD_NAME_MAX else line[: THREAD_NAME_MAX - 1] + "…"


def _mention_tokens(bot: BotIdentity) -> tuple[str, str]:
    return f"<@{bot.user_id}>", f"<@!{bot.user_id}>"


def mentions_bot(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    mentions = message.get("mentions")
    if isinstance(mentions, list) and any(
        isinstance(m, Mapping) and m.get("id") == bot.user_id for m in mentions
    ):
        return True
    content = message.get("content")
    return isinstance(content, str) and any(t in content for t in _mention_tokens(bot))


def readable(text: str, bot: BotIdentity) -> str:
    """The content as stored: the bot's mention token as ``@name``."""
    for token in _mention_tokens(bot):
        text = text.replace(token, f"@{bot.username}")
    return text


def _attachments(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    files = message.get("attachments")
    if not isinstance(files, list):
        return ()
    out: list[Attachment] = []
    for f in files:
        if not isinstance(f, Mapping) or not isinstance(f.get("url"), str):
            continue
        mime = f.get("content_type") if isinstance(f.get("content_type"), str) else None
        size = f.get("size")
        out.append(
            Attachment(
                kind="image" if mime and mime.startswith("image/") else "file",
                name=f.get("filename") if isinstance(f.get("filename"), str) else None,
                url=f["url"],
                mime_type=mime,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                file_id=f.get("id") if isinstance(f.get("id"), str) else None,
            )
        )
    return tuple(out)


def _author(message: Mapping[str, Any]) -> Mapping[str, Any] | None:
    author = message.get("author")
    return author if isinstance(author, Mapping) and is_snowflake(author.get("id")) else None


def extract_message(
    message: Mapping[str, Any],
    *,
    bot: BotIdentity,
    channel: Channel,
    kind: EventKind = EventKind.MESSAGE,
    source: str = "gateway",
) -> Extracted:
    """One message object -> Envelope | Ignored | Rejected (the live path and the history
    catch-up share it, so both give the same ids)."""
    mid, cid = message.get("id"), message.get("channel_id")
    if not is_snowflake(mid) or not is_snowflake(cid):
        return Rejected(platform=PLATFORM, reason="message without a snowflake id or channel_id")
    mid, cid = str(mid), str(cid)
    guild = message.get("guild_id")
    key = session_key(
        channel=channel, guild_id=str(guild) if is_snowflake(guild) else None, message_id=mid
    )
    if kind is EventKind.DELETE:
        return _deletion(key, mid, cid, channel=channel, source=source)
    author = _author(message)
    if author is None:
        return Rejected(
            platform=PLATFORM, reason="message without an author", event_id=f"message:{mid}"
        )
    user_id = str(author["id"])
    raw_text = message.get("content")
    raw_text = raw_text if isinstance(raw_text, str) else ""
    text = readable(raw_text, bot)
    attachments = _attachments(message)
    reference = message.get("message_reference")
    reply_to = reference.get("message_id") if isinstance(reference, Mapping) else None
    bare = re.sub(r"^\s*(<@!?\d+>\s*)+", "", raw_text)
    facts = _facts(
        message, key, author, bot=bot, channel=channel, raw_text=raw_text, files=bool(attachments)
    )
    message_type = message.get("type", 0)
    if not isinstance(message_type, int) or isinstance(message_type, bool):
        return Rejected(platform=PLATFORM, reason="message type is not a number")
    if message_type not in CONVERSATION_TYPES:
        return Ignored(
            platform=PLATFORM,
            reason=f"system message type {message_type}",
            event_id=f"message:{mid}",
            facts=facts,
            kind=kind,
        )
    name = author.get("global_name") or author.get("username")
    envelope = Envelope(
        key=key,
        target=_target(
            key, mid, None if channel.thread or channel.direct else thread_name(raw_text)
        ),
        message_id=mid,
        text=text,
        sender=Sender(
            id=user_id, name=name if isinstance(name, str) else None, is_bot=facts.from_bot
        ),
        event_id=f"message:{mid}",
        command=command_name(bare) if kind is EventKind.MESSAGE else None,
        reply_to_id=str(reply_to) if is_snowflake(reply_to) else None,
        attachments=attachments,
        sent_at=_iso(message.get("timestamp")) or snowflake_time(mid),
        place=Place(
            direct=channel.type == DM,
            chat_name=None if channel.direct or channel.thread else channel.name,
            thread_name=channel.name if channel.thread else None,
        ),
        metadata={"channel_id": cid, "source": source},
        facts=facts,
    )
    return _as_edit(envelope, message) if kind is EventKind.EDIT else envelope


def _as_edit(envelope: Envelope, message: Mapping[str, Any]) -> Envelope:
    """A MESSAGE_UPDATE: the message's new text, one event per edit (its edited time)."""
    edited = message.get("edited_timestamp")
    return replace(
        envelope,
        event_id=f"edit:{envelope.message_id}:{edited if isinstance(edited, str) else ''}",
        kind=EventKind.EDIT,
        trigger=Trigger.NEVER,
        command=None,
        sent_at=_iso(edited) or envelope.sent_at,
    )


def _deletion(key: SessionKey, mid: str, cid: str, *, channel: Channel, source: str) -> Envelope:
    """A deleted message: its ids are all Discord sends (no author, no text)."""
    return Envelope(
        key=key,
        target=_target(key, mid, None),
        message_id=mid,
        text="",
        sender=Sender(id=""),
        event_id=f"delete:{mid}",
        kind=EventKind.DELETE,
        trigger=Trigger.NEVER,
        place=Place(direct=channel.type == DM, chat_name=channel.name),
        metadata={"channel_id": cid, "source": source},
        facts=Facts(place=key, person=None, direct=channel.type == DM),
    )


def _facts(
    message: Mapping[str, Any],
    key: SessionKey,
    author: Mapping[str, Any],
    *,
    bot: BotIdentity,
    channel: Channel,
    raw_text: str,
    files: bool,
) -> Facts:
    """What the core's door needs to know about a message (the adapter decides nothing)."""
    user_id = str(author["id"])
    referenced = message.get("referenced_message")
    ref_author = _author(referenced) if isinstance(referenced, Mapping) else None
    return Facts(
        place=key,
        person=user_id,
        direct=channel.type == DM,
        mentioned=mentions_bot(message, bot),
        reply_to_bot=ref_author is not None and ref_author.get("id") == bot.user_id,
        thread_reply=channel.thread,
        from_bot=author.get("bot") is True,
        from_self=user_id == bot.user_id,
        content=bool(raw_text.strip() or files),
    )


def _target(key: SessionKey, message_id: str, new_thread: str | None) -> ReplyTarget:
    """Where the answer goes. ``new_thread``: the name of the thread the first answer starts
    on the message (a channel message; ``None`` where the place already is one)."""
    return ReplyTarget(
        platform=PLATFORM,
        scope=key.scope,
        chat_id=key.chat_id,
        thread_id=key.thread_id,
        reply_to_message_id=message_id,
        extra={"thread_name": new_thread} if new_thread else {},
    )


def message_order(message: Mapping[str, Any]) -> int:
    """Sort key of fetched messages: the snowflake (creation order)."""
    mid = message.get("id")
    return int(mid) if isinstance(mid, str) and is_snowflake(mid) else 0
