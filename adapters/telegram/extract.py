"""Pure extraction: one raw Bot API ``Update`` dict -> ``Envelope | Ignored | Rejected``.

No I/O and no python-telegram-bot objects: the adapter feeds the JSON exactly as the Bot API
sent it, so an update PTB cannot parse (new fields, a missing ``chat``) still becomes a
``Rejected`` dead letter instead of wedging the polling loop (platforms.md §1.7).

The routing rule (platforms.md §0) lives in ``session_key`` and ``reply_target``, once. Who is
answered is not decided here: ``facts_of`` reports what a message is and the core's ingress
decides (``gateway.inbound.ingress.admit``), for every platform alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from adapters.telegram.callbacks import APPROVAL_PREFIX as APPROVAL_PREFIX
from adapters.telegram.callbacks import ApprovalPress as ApprovalPress
from adapters.telegram.callbacks import callback_of as callback_of
from adapters.telegram.callbacks import reaction_of as reaction_of
from adapters.telegram.kinds import (
    SERVICE_FIELDS,
    attachments_of,
    is_int,
    kind_of_content,
)
from adapters.telegram.settings import TelegramSettings
from gateway.core.commands import COMMANDS
from gateway.core.domain import (
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
from gateway.core.plugins import Shorthand

PLATFORM = "telegram"
#: scope for chats of the bot itself; a business connection id replaces it (platforms.md §1.5)
BOT_SCOPE = "bot"

#: update types that carry a conversational message, and whether they are edits
_MESSAGE_UPDATES: Mapping[str, bool] = {
    "message": False,
    "business_message": False,
    "edited_message": True,
    "edited_business_message": True,
}
_CHANNEL_UPDATES = ("channel_post", "edited_channel_post")


# Telegram sends commands as a ``bot_command`` entity; this is only the fallback for
# hand-written payloads without ``entities`` at all.
_COMMAND_RE = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]{1,64}))?(?=\s|$)")


@dataclass(frozen=True, slots=True, kw_only=True)
class BotIdentity:
    """Who we are, from ``getMe`` at start: to spot our own messages, mentions and replies."""

    id: int
    username: str


def answer_settings(settings: TelegramSettings) -> Shorthand:
    """Telegram's own answer settings (``TELEGRAM_*``), as shorthands of the one vocabulary:
    the plugin declares them, the core's ingress applies them (``gateway.inbound.policy``)."""
    return Shorthand(
        platform=PLATFORM,
        allowed_chats=settings.telegram_allowed_chats,
        allowed_chats_name="TELEGRAM_ALLOWED_CHATS",
        allowed_users=settings.telegram_allowed_users,
        allowed_users_name="TELEGRAM_ALLOWED_USERS",
        answer_all_chats=settings.telegram_answer_all_chats,
    )


class _Reject(Exception):
    """Internal: the update cannot be understood (becomes ``Rejected``)."""


# --- the routing rule (platforms.md §0) -------------------------------------------------------


def topic_id(message: Mapping[str, Any]) -> str | None:
    """The forum / private-chat topic a message belongs to, or ``None``.

    ``message_thread_id`` counts ONLY with ``is_topic_message``: replies inside General and
    reply chains in non-forum supergroups carry the chain root's id there, and sending to it
    fails with "message thread not found" (tdlib/telegram-bot-api#447, platforms.md §1.3-1.4).
    The General topic (id 1) arrives without either field, so it is "no topic" too.
    """
    thread = message.get("message_thread_id")
    if message.get("is_topic_message") is True and is_int(thread):
        return str(thread)
    return None


def direct_messages_topic_id(message: Mapping[str, Any]) -> str | None:
    """Channel direct-messages chats (Bot API 9.2) thread by ``direct_messages_topic``."""
    dm_topic = message.get("direct_messages_topic")
    if isinstance(dm_topic, Mapping) and is_int(dm_topic.get("topic_id")):
        return str(dm_topic["topic_id"])
    return None


def session_key(message: Mapping[str, Any]) -> SessionKey:
    chat = _chat(message)
    business = _business_connection_id(message)
    return SessionKey(
        platform=PLATFORM,
        scope=business or BOT_SCOPE,
        chat_id=str(chat["id"]),
        thread_id=topic_id(message) or direct_messages_topic_id(message),
    )


def reply_target(message: Mapping[str, Any]) -> ReplyTarget:
    """Where the answer goes, as sendMessage wants it: ``thread_id`` is the topic id or
    ``None`` (never 1, never a reply-chain id); channel DM topics and business connections
    travel in ``extra`` because they are separate send parameters."""
    chat = _chat(message)
    business = _business_connection_id(message)
    extra: dict[str, str] = {}
    if business:
        extra["business_connection_id"] = business
    dm_topic = direct_messages_topic_id(message)
    if dm_topic is not None:
        extra["direct_messages_topic_id"] = dm_topic
    return ReplyTarget(
        platform=PLATFORM,
        scope=business or BOT_SCOPE,
        chat_id=str(chat["id"]),
        thread_id=topic_id(message),
        reply_to_message_id=str(message["message_id"]),
        extra=extra,
    )


# --- the entry point ------------------------------------------------------------------------


def extract_update(update: Mapping[str, Any], *, bot: BotIdentity) -> Extracted:
    """Normalize one raw Update. Never raises: anything unexpected becomes ``Rejected``."""
    if not isinstance(update, Mapping):
        return Rejected(platform=PLATFORM, reason="update is not a JSON object")
    update_id = update.get("update_id")
    event_id = str(update_id) if is_int(update_id) else None
    if event_id is None:
        return Rejected(platform=PLATFORM, reason="update without an integer update_id")
    try:
        return _extract(update, event_id=event_id, bot=bot)
    except _Reject as exc:
        return Rejected(platform=PLATFORM, reason=str(exc), event_id=event_id)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # A payload shape we did not foresee: record it as a dead letter with the reason
        # rather than crash the receive loop (architecture.md invariant 7).
        return Rejected(
            platform=PLATFORM,
            reason=f"malformed update: {type(exc).__name__}: {exc}",
            event_id=event_id,
        )


def _extract(update: Mapping[str, Any], *, event_id: str, bot: BotIdentity) -> Extracted:
    kinds = [k for k in update if k != "update_id"]
    if not kinds:
        return Rejected(platform=PLATFORM, reason="update without content", event_id=event_id)
    kind = kinds[0]  # "At most one of the optional parameters can be present" (Bot API Update)
    if kind in _CHANNEL_UPDATES:
        return _ignored(f"{kind}: channel posts are not conversations", event_id)
    if kind == "deleted_business_messages":
        return _deleted_business(update[kind], event_id=event_id)
    if kind not in _MESSAGE_UPDATES:
        return _ignored(f"unsupported update type: {kind}", event_id)
    message = update[kind]
    if not isinstance(message, Mapping):
        raise _Reject(f"{kind} is not an object")
    edited = _MESSAGE_UPDATES[kind]
    return _message(message, event_id=event_id, edited=edited, bot=bot)


def _message(
    message: Mapping[str, Any],
    *,
    event_id: str,
    edited: bool,
    bot: BotIdentity,
) -> Extracted:
    chat = _chat(message)
    if not is_int(message.get("message_id")):
        raise _Reject("message without an integer message_id")
    chat_type = str(chat.get("type") or "")
    if chat_type == "channel":
        return _ignored("message in a channel: channel posts are not conversations", event_id)

    sender, user_id = _sender(message, chat)
    text = message.get("text")
    entities_field = "entities"
    if not isinstance(text, str):
        text = message.get("caption")
        entities_field = "caption_entities"
    text = text if isinstance(text, str) else ""
    entities = _entities(message.get(entities_field))
    attachments = attachments_of(message)
    has_entities = entities_field in message
    command = None if edited else _command(text, entities, bot, has_entities=has_entities)
    facts = facts_of(
        message,
        sender=sender,
        user_id=user_id,
        mentioned=_mentions(text, entities, bot),
        command=command is not None and command[1],
        content=bool(text) or bool(attachments),
        bot=bot,
    )
    content_kind = kind_of_content(message, has_text=bool(text))
    if content_kind is None:
        service = next((f for f in SERVICE_FIELDS if f in message), None)
        if service is not None:
            # the answer policy's refusal, if any, is still the reason kept
            return Ignored(
                platform=PLATFORM,
                reason=f"service message: {service}",
                event_id=event_id,
                facts=facts,
                kind=EventKind.EDIT if edited else EventKind.MESSAGE,
            )
        content_kind = "unknown"

    reply_to_id = _genuine_reply_to(message)

    metadata: dict[str, Any] = {"chat_type": chat_type, "content": content_kind}
    if isinstance(chat.get("title"), str):
        metadata["chat_title"] = chat["title"]
    if message.get("is_automatic_forward") is True:
        metadata["automatic_forward"] = True

    return Envelope(
        key=session_key(message),
        target=reply_target(message),
        message_id=str(message["message_id"]),
        text=text,
        sender=sender,
        event_id=event_id,
        # an edit annotates the stored message, never answered again (platforms.md §1.6); the
        # core's ingress decides the trigger of a message from its facts
        kind=EventKind.EDIT if edited else EventKind.MESSAGE,
        command=command[0] if command and command[1] and command[0] in COMMANDS else None,
        reply_to_id=reply_to_id,
        attachments=attachments,
        sent_at=_timestamp(message.get("edit_date") if edited else message.get("date")),
        place=Place(
            direct=chat_type == "private",
            chat_name=chat["title"] if isinstance(chat.get("title"), str) else None,
        ),
        metadata=metadata,
        facts=facts,
    )


def _deleted_business(payload: Any, *, event_id: str) -> Extracted:
    if not isinstance(payload, Mapping):
        raise _Reject("deleted_business_messages is not an object")
    ids = payload.get("message_ids")
    chat = _chat(payload)
    business = payload.get("business_connection_id")
    if not isinstance(business, str) or not business:
        raise _Reject("deleted_business_messages without business_connection_id")
    if not isinstance(ids, list) or len(ids) != 1 or not is_int(ids[0]):
        # One Extracted per update: a batch delete cannot be expressed as one DELETE event.
        return _ignored("deleted_business_messages with several ids is not recorded", event_id)
    chat_id = str(chat["id"])
    key = SessionKey(platform=PLATFORM, scope=business, chat_id=chat_id)
    # who deleted it is not said; the place is enough to refuse it
    facts = Facts(place=key, person=None)
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM,
            scope=business,
            chat_id=chat_id,
            extra={"business_connection_id": business},
        ),
        message_id=str(ids[0]),
        text="",
        sender=Sender(id=chat_id),
        event_id=event_id,
        kind=EventKind.DELETE,
        trigger=Trigger.NEVER,
        facts=facts,
    )


# --- triggers -------------------------------------------------------------------------------


def facts_of(
    message: Mapping[str, Any],
    *,
    sender: Sender,
    user_id: int | None,
    mentioned: bool,
    command: bool,
    content: bool,
    bot: BotIdentity,
) -> Facts:
    """What a message is, for the answer policy: nothing here decides. Telegram has no
    reply threads to follow up in (a topic is a whole channel of talk), so ``thread_reply``
    stays false; a reply to one of the bot's messages is ``reply_to_bot``."""
    chat = _chat(message)
    return Facts(
        place=session_key(message),
        person=sender.id,
        direct=chat.get("type") == "private",
        mentioned=mentioned,
        reply_to_bot=_is_reply_to_bot(message, bot),
        command=command,
        from_bot=sender.is_bot,
        from_self=user_id is not None and user_id == bot.id,
        # the linked channel's post copied into its discussion group: context, not a question
        automatic=message.get("is_automatic_forward") is True,
        content=content,
    )


def _command(
    text: str, entities: list[Mapping[str, Any]], bot: BotIdentity, *, has_entities: bool
) -> tuple[str, bool] | None:
    """``(name, addressed_to_us)`` for a leading ``/command[@bot]``, else ``None``."""
    token: str | None = None
    if has_entities:
        for entity in entities:
            if entity.get("type") == "bot_command" and entity.get("offset") == 0:
                token = _utf16_slice(text, 0, int(entity.get("length", 0)))
                break
    else:
        match = _COMMAND_RE.match(text)
        token = match.group(0) if match else None
    if not token or not token.startswith("/"):
        return None
    name, _, addressee = token[1:].partition("@")
    # /new@OtherBot in a group is someone else's command (Bot API "Commands" section)
    ours = not addressee or addressee.lower() == bot.username.lower()
    return name.lower(), ours


def _mentions(text: str, entities: list[Mapping[str, Any]], bot: BotIdentity) -> bool:
    handle = "@" + bot.username.lower()
    for entity in entities:
        kind = entity.get("type")
        if kind == "mention":
            offset, length = entity.get("offset"), entity.get("length")
            if isinstance(offset, int) and isinstance(length, int):
                if _utf16_slice(text, offset, length).lower() == handle:
                    return True
        elif kind == "text_mention":
            user = entity.get("user")
            if isinstance(user, Mapping) and user.get("id") == bot.id:
                return True
    return False


def _is_reply_to_bot(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping) or _is_topic_root(message, replied):
        return False
    author = replied.get("from")
    return isinstance(author, Mapping) and author.get("id") == bot.id


def _genuine_reply_to(message: Mapping[str, Any]) -> str | None:
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping) or _is_topic_root(message, replied):
        return None
    replied_id = replied.get("message_id")
    return str(replied_id) if is_int(replied_id) else None


def _is_topic_root(message: Mapping[str, Any], replied: Mapping[str, Any]) -> bool:
    """In forum topics ``reply_to_message`` is often the ``forum_topic_created`` service
    message (its id = the thread id), not a user reply (payload
    telegram_update_forum_topic_message.json, platforms.md §1.2). If the bot created the
    topic, that service message is "from" the bot, so it must not count as a reply to us."""
    if "forum_topic_created" in replied:
        return True
    return message.get("is_topic_message") is True and replied.get("message_id") == message.get(
        "message_thread_id"
    )


# --- small parsers --------------------------------------------------------------------------


def _chat(message: Mapping[str, Any]) -> Mapping[str, Any]:
    chat = message.get("chat")
    if not isinstance(chat, Mapping) or not is_int(chat.get("id")):
        raise _Reject("message without a chat id")
    return chat


def _business_connection_id(message: Mapping[str, Any]) -> str | None:
    value = message.get("business_connection_id")
    return value if isinstance(value, str) and value else None


def _sender(message: Mapping[str, Any], chat: Mapping[str, Any]) -> tuple[Sender, int | None]:
    """The author, and the user id when there is one (to spot our own messages)."""
    sender_chat = message.get("sender_chat")
    user = message.get("from")
    if isinstance(sender_chat, Mapping) and is_int(sender_chat.get("id")):
        # Anonymous group admins post as the group ("from" is the GroupAnonymousBot, a bot
        # account) and channels post as the channel: the person behind is the chat, not a bot.
        title = sender_chat.get("title")
        return (
            Sender(id=str(sender_chat["id"]), name=title if isinstance(title, str) else None),
            None,
        )
    if isinstance(user, Mapping) and is_int(user.get("id")):
        return (
            Sender(
                id=str(user["id"]),
                name=_display_name(user),
                is_bot=user.get("is_bot") is True,
            ),
            int(user["id"]),
        )
    raise _Reject("message without a sender")


def _display_name(user: Mapping[str, Any]) -> str | None:
    parts = [user.get("first_name"), user.get("last_name")]
    name = " ".join(p for p in parts if isinstance(p, str) and p)
    if name:
        return name
    username = user.get("username")
    return username if isinstance(username, str) else None


def _entities(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [e for e in value if isinstance(e, Mapping)]


def _timestamp(value: Any) -> datetime | None:
    if is_int(value) and value > 0:
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, ValueError, OSError):  # out of range (found by fuzzing)
            return None
    return None


def _utf16_slice(text: str, offset: int, length: int) -> str:
    """Entity offsets and lengths count UTF-16 code units (Bot API "MessageEntity")."""
    data = text.encode("utf-16-le")
    return data[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def _ignored(reason: str, event_id: str) -> Ignored:
    return Ignored(platform=PLATFORM, reason=reason, event_id=event_id)
