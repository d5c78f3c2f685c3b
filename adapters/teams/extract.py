"""One Bot Framework activity -> one ``Extracted`` value; facts only, nothing decided.

Routing (platforms.md §9): a channel post's conversation id is ``19:…@thread.tacv2;messageid=
<root>``; the part before ``;messageid=`` is the channel and the root activity id is the thread.
A root post and every reply in its chain share that root, so they share a session. A 1:1 chat
(``personal``) and a group chat (``groupChat``) are one place each, without threads."""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from microsoft_agents.activity import Activity
from pydantic import ValidationError

from gateway.core.commands import command_name
from gateway.core.domain import (
    Envelope,
    EventKind,
    Extracted,
    Facts,
    Ignored,
    Place,
    Reaction,
    Rejected,
    ReplyTarget,
    Sender,
    SessionKey,
    Trigger,
)

PLATFORM = "teams"
#: the key of a reply target's ``extra`` holding the connector to reply through
SERVICE_URL = "service_url"
#: the thread separator of a channel conversation id
MESSAGE_ID = ";messageid="
#: a tenant-less activity (the Bot Framework emulator) is kept under this scope
NO_TENANT = "common"

_AT = re.compile(r"<at>(.*?)</at>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"</?(?:p|div|span|br)\b[^>]*>", re.IGNORECASE)


def split_conversation(conversation_id: str) -> tuple[str, str | None]:
    """``(channel or chat id, root activity id or None)``."""
    base, sep, root = conversation_id.partition(MESSAGE_ID)
    return base, (root or None) if sep else None


def thread_conversation(chat_id: str, thread_id: str | None) -> str:
    """The conversation id a reply is posted to: the reply chain of ``thread_id`` in a
    channel, the chat itself otherwise."""
    return f"{chat_id}{MESSAGE_ID}{thread_id}" if thread_id else chat_id


def parse_activity(payload: Mapping[str, Any]) -> Activity:
    """The SDK's activity model of a request body; ``None`` values are dropped first (the
    model refuses an explicit ``null`` where Teams sometimes sends one). Raises
    ``ValueError``."""
    try:
        return Activity.model_validate(_without_nulls(payload))
    except ValidationError as exc:
        raise ValueError(f"not an activity: {exc.error_count()} invalid fields") from exc
    except Exception as exc:  # broad on purpose: the SDK's own validators raise TypeError,
        # and more, for some malformed fields (an empty channelId): any of it is bad input
        raise ValueError(f"not an activity: {exc.__class__.__name__}") from exc


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value if v is not None]
    return value


@dataclass(frozen=True, slots=True)
class Where:
    """Where an activity happened, as the gateway keys it."""

    key: SessionKey
    target: ReplyTarget
    direct: bool
    channel: bool


def where(activity: Activity) -> Where | None:
    """The place of an activity, or ``None`` when it names no conversation or connector."""
    conversation = activity.conversation
    if conversation is None or not conversation.id or not activity.service_url:
        return None
    base, root = split_conversation(conversation.id)
    kind = conversation.conversation_type or ""
    # Teams says "channel"; a payload without the type is known by its thread id
    channel = kind == "channel" or (not kind and base.endswith(("@thread.tacv2", "@thread.skype")))
    if channel and root is None:
        root = activity.reply_to_id or activity.id
    thread = root if channel else None
    scope = tenant_of(activity)
    key = SessionKey(platform=PLATFORM, scope=scope, chat_id=base, thread_id=thread)
    target = ReplyTarget(
        platform=PLATFORM,
        scope=scope,
        chat_id=key.chat_id,
        thread_id=thread,
        reply_to_message_id=activity.id,
        extra={SERVICE_URL: activity.service_url},
    )
    return Where(key=key, target=target, direct=kind == "personal", channel=channel)


def tenant_of(activity: Activity) -> str:
    conversation = activity.conversation
    if conversation is not None and conversation.tenant_id:
        return str(conversation.tenant_id)
    data = activity.channel_data if isinstance(activity.channel_data, Mapping) else {}
    tenant = data.get("tenant")
    if isinstance(tenant, Mapping) and isinstance(tenant.get("id"), str) and tenant["id"]:
        return str(tenant["id"])
    return NO_TENANT


def person_of(activity: Activity) -> str | None:
    """The sender's id: the Entra object id where Teams gives it (the same for every bot),
    else the channel account id."""
    sender = activity.from_property
    if sender is None:
        return None
    return sender.aad_object_id or sender.id or None


def model_text(activity: Activity) -> str:
    """The text the model sees: the bot's own mention removed, other mentions as ``@Name``,
    the few HTML tags and entities Teams puts into a message's text undone."""
    text = activity.remove_recipient_mention() if activity.text else ""
    text = _AT.sub(lambda m: "@" + m.group(1).strip(), text)
    text = _TAG.sub(lambda m: "\n" if m.group(0).lower().startswith("<br") else "", text)
    return html.unescape(text).strip()


def _channel_name(activity: Activity) -> str | None:
    data = activity.channel_data if isinstance(activity.channel_data, Mapping) else {}
    channel = data.get("channel")
    if isinstance(channel, Mapping) and isinstance(channel.get("name"), str):
        return str(channel["name"]) or None
    conversation = activity.conversation
    return conversation.name if conversation is not None and conversation.name else None


def extract_activity(activity: Activity) -> Extracted:
    """A ``message``, ``messageUpdate`` or ``messageDelete``; anything else is ignored (its
    type is the reason). Invokes are the adapter's (``card_press``)."""
    kind = str(activity.type or "")
    event_id = activity.id
    if kind not in ("message", "messageUpdate", "messageDelete"):
        return Ignored(
            platform=PLATFORM, reason=f"activity {kind or 'without type'}", event_id=None
        )
    place = where(activity)
    if place is None or not activity.id:
        return Rejected(
            platform=PLATFORM, reason=f"{kind} without conversation or id", event_id=event_id
        )
    sender = activity.from_property
    person = person_of(activity)
    recipient = activity.recipient
    from_self = bool(
        sender is not None and recipient is not None and sender.id and sender.id == recipient.id
    )
    from_bot = from_self or (sender is not None and sender.role == "bot")
    mentioned = kind != "messageDelete" and activity.is_recipient_mentioned()
    text = model_text(activity) if kind != "messageDelete" else ""
    command = command_name(text) if kind == "message" else None
    facts = Facts(
        place=place.key,
        person=person,
        direct=place.direct,
        mentioned=mentioned,
        command=command is not None,
        thread_reply=place.channel and activity.id != place.key.thread_id,
        from_bot=from_bot,
        from_self=from_self,
        content=bool(text) or kind != "message" or bool(activity.attachments),
    )
    envelope = Envelope(
        key=place.key,
        target=place.target,
        message_id=activity.id,
        text=text,
        sender=Sender(
            id=person or "unknown",
            name=sender.name if sender is not None else None,
            is_bot=from_bot,
        ),
        event_id=activity.id,
        command=command,
        reply_to_id=place.key.thread_id if facts.thread_reply else None,
        sent_at=activity.timestamp if isinstance(activity.timestamp, datetime) else None,
        place=Place(direct=place.direct, chat_name=_channel_name(activity)),
        metadata={"conversation_type": activity.conversation.conversation_type}
        if activity.conversation is not None and activity.conversation.conversation_type
        else {},
        facts=facts,
    )
    if kind == "messageUpdate":
        # Teams names the edit only by its time: the same edit delivered twice is one event
        stamp = activity.timestamp.isoformat() if activity.timestamp else ""
        return replace(
            envelope,
            event_id=f"edit:{activity.id}:{stamp}",
            kind=EventKind.EDIT,
            trigger=Trigger.NEVER,
            command=None,
        )
    if kind == "messageDelete":
        return replace(
            envelope,
            event_id=f"delete:{activity.id}",
            kind=EventKind.DELETE,
            trigger=Trigger.NEVER,
            command=None,
        )
    return envelope


# --- presses and reactions -------------------------------------------------------------------

#: the verbs of an approval card's ``Action.Execute`` buttons
APPROVE_VERB = "approve"
DENY_VERB = "deny"


@dataclass(frozen=True, slots=True)
class CardPress:
    """An ``adaptiveCard/action`` invoke from an approval card."""

    approval_id: str
    approve: bool
    person: str
    chat_id: str
    thread_id: str | None
    message_id: str | None


def card_press(activity: Activity) -> CardPress | None:
    """The approval press an invoke carries, or ``None`` (another invoke, another card)."""
    if activity.type != "invoke" or activity.name != "adaptiveCard/action":
        return None
    value = activity.value if isinstance(activity.value, Mapping) else {}
    action = value.get("action")
    if not isinstance(action, Mapping):
        return None
    verb = action.get("verb")
    data = action.get("data")
    approval_id = data.get("approval_id") if isinstance(data, Mapping) else None
    person = person_of(activity)
    place = where(activity)
    if (
        verb not in (APPROVE_VERB, DENY_VERB)
        or not isinstance(approval_id, str)
        or not approval_id
        or person is None
        or place is None
    ):
        return None
    return CardPress(
        approval_id=approval_id,
        approve=verb == APPROVE_VERB,
        person=person,
        chat_id=place.key.chat_id,
        thread_id=place.key.thread_id,
        message_id=activity.reply_to_id,
    )


#: Teams' reaction types that are feedback (thumbs up; there is no thumbs down reaction)
_LIKE = {"like": 1, "heart": 1}


def reaction_of(activity: Activity) -> Reaction | None:
    """A 👍 reaction (``messageReaction``) on a message, or a press of the feedback buttons
    Teams shows under the bot's answers (``message/submitAction`` with ``feedback``)."""
    place = where(activity)
    person = person_of(activity)
    if place is None or person is None or not activity.reply_to_id:
        return None
    if activity.type == "messageReaction":
        added = [r.type for r in activity.reactions_added or [] if r.type in _LIKE]
        removed = [r.type for r in activity.reactions_removed or [] if r.type in _LIKE]
        if not added and not removed:
            return None
        return Reaction(
            chat_id=place.key.chat_id,
            message_id=activity.reply_to_id,
            user_id=person,
            value=1 if added else 0,
        )
    if activity.type == "invoke" and activity.name == "message/submitAction":
        value = activity.value if isinstance(activity.value, Mapping) else {}
        action_value = value.get("actionValue")
        if value.get("actionName") != "feedback" or not isinstance(action_value, Mapping):
            return None
        reaction = action_value.get("reaction")
        if reaction not in ("like", "dislike"):
            return None
        return Reaction(
            chat_id=place.key.chat_id,
            message_id=activity.reply_to_id,
            user_id=person,
            value=1 if reaction == "like" else -1,
        )
    return None
