"""Pure extraction: a Slack Events API payload (dict) -> Envelope | Ignored | Rejected.

No I/O here. Facts this module encodes (``shared/spec/platforms.md`` §0, §2):

* The session of a channel message is its thread: ``(team_id, channel, thread_ts or ts)``. In a
  DM (``channel_type == "im"``) the conversation is one session unless the message is a thread
  reply. The reply always goes to the ROOT ``thread_ts``, never a reply's own ``ts`` (§2.5).
* ``message_replied`` arrives over the Events API WITHOUT ``subtype`` but with ``hidden: true``
  and no top-level ``user``/``text`` (§2.5, docs.slack.dev/reference/events/message/
  message_replied); routing it by ``event.ts`` would invent a thread, so it is ignored.
* Most bot messages no longer carry ``subtype: bot_message``; ``bot_id`` is the reliable marker
  (§2.4, bolt's own comment in ``async_app.py``).
* A mention may arrive twice, as ``app_mention`` and as ``message`` with different ``event_id``s
  (§2.6); both produce the same ``message_id`` (the ``ts``) so the core's inbox stores it once.

Who is answered is not decided here: ``facts_of`` reports what the message is (direct,
mentioned, a thread reply, from a bot, from the bot itself) and the core's ingress decides
(``gateway.inbound.ingress.admit``), for every platform alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from adapters.slack.settings import SlackSettings
from gateway.core.commands import command_name
from gateway.core.domain import (
    STOP_EMOJI,
    Attachment,
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
from gateway.core.plugins import Shorthand

PLATFORM = "slack"

#: subtypes that are real messages a person wrote (§2.4: bolt's ``app.message()`` matcher keeps
#: None/bot_message/thread_broadcast/file_share; ``me_message`` is a ``/me`` line).
_CONVERSATIONAL_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message"})
_TS_RE = re.compile(r"^\d+\.\d+$")
#: the reply target's ``extra`` key naming the person who asked: Slack streams an answer
#: outside a DM only to a named recipient (chat.startStream ``recipient_user_id``)
RECIPIENT = "recipient_user_id"


@dataclass(frozen=True, slots=True, kw_only=True)
class BotIdentity:
    """Who the bot is, from ``auth.test``: ``user_id`` is what mentions name (``<@U…>``),
    ``bot_id`` (``B…``) is what the bot's own posts carry."""

    user_id: str
    bot_id: str | None = None
    team_id: str | None = None


def answer_settings(settings: SlackSettings) -> Shorthand:
    """Slack's own answer settings (``SLACK_*``), as shorthands of the one vocabulary: the
    plugin declares them, the core's ingress applies them (``gateway.inbound.policy``)."""
    return Shorthand(
        platform=PLATFORM,
        chat_word="channel",
        allowed_chats=settings.slack_allowed_channels,
        allowed_chats_name="SLACK_ALLOWED_CHANNELS",
        allowed_users=settings.slack_allowed_users,
        allowed_users_name="SLACK_ALLOWED_USERS",
        answer_all_chats=settings.slack_answer_all_channels,
        require_mention=settings.slack_require_mention,
    )


# --- the one routing rule ---------------------------------------------------------------


def route(
    *,
    team_id: str,
    channel: str,
    ts: str,
    thread_ts: str | None,
    is_dm: bool,
) -> tuple[SessionKey, ReplyTarget]:
    """Session key and reply target of a message, written once (platforms.md §0).

    Channels: the thread root (``thread_ts or ts``) is both the session's thread and the
    ``thread_ts`` to send with, so a top-level mention opens a thread under itself. DMs: a
    top-level message belongs to the DM itself (reply in the DM, no thread); a DM thread reply
    is its own session, answered in that thread.
    """
    thread: str | None = thread_ts if is_dm else (thread_ts or ts)
    key = SessionKey(platform=PLATFORM, scope=team_id, chat_id=channel, thread_id=thread)
    target = ReplyTarget(
        platform=PLATFORM,
        scope=team_id,
        chat_id=channel,
        thread_id=thread,
        reply_to_message_id=ts,
    )
    return key, target


# --- small pure helpers --------------------------------------------------------------------


def ts_key(ts: str) -> Decimal:
    """Slack ``ts`` strings order as decimals ("1.10" is after "1.9" only numerically)."""
    try:
        return Decimal(ts)
    except InvalidOperation:
        return Decimal(0)


def mention_pattern(user_id: str) -> re.Pattern[str]:
    # Slack encodes a user mention as <@U123> or, in older clients/payloads, <@U123|name>.
    return re.compile(r"<@" + re.escape(user_id) + r"(?:\|[^>]*)?>")


def is_dm_channel(channel: str, channel_type: object) -> bool:
    """``channel_type`` is on ``message`` events; ``app_mention`` lacks it, and DM channel ids
    start with ``D`` (and DMs never produce ``app_mention`` anyway, §2.6)."""
    if isinstance(channel_type, str) and channel_type:
        return channel_type == "im"
    return channel.startswith("D")


def strip_leading_mention(text: str, me: BotIdentity) -> str:
    """Drop the ``<@BOT>`` that addresses the bot at the start; other mentions stay as written."""
    match = mention_pattern(me.user_id).match(text.lstrip())
    if match is None:
        return text
    return text.lstrip()[match.end() :].lstrip(" \t,:")


_POSITIVE = frozenset({"+1", "thumbsup"})
_NEGATIVE = frozenset({"-1", "thumbsdown"})


def reaction_of(payload: object) -> Reaction | None:
    """``reaction_added`` / ``reaction_removed`` with +1 or -1 on a message, else ``None``.
    Skin tones (``+1::skin-tone-3``) count as the base reaction."""
    if not isinstance(payload, Mapping):
        return None
    event = payload.get("event")
    if not isinstance(event, Mapping) or event.get("type") not in (
        "reaction_added",
        "reaction_removed",
    ):
        return None
    item, user, name = event.get("item"), event.get("user"), event.get("reaction")
    if not (isinstance(item, Mapping) and isinstance(user, str) and isinstance(name, str)):
        return None
    channel, ts = item.get("channel"), item.get("ts")
    if item.get("type") != "message" or not isinstance(channel, str) or not isinstance(ts, str):
        return None
    base = name.split("::", 1)[0]
    if base == STOP_EMOJI:
        if event["type"] != "reaction_added":
            return None
        return Reaction(chat_id=channel, message_id=ts, user_id=user, value=0, stop=True)
    if base in _POSITIVE:
        value = 1
    elif base in _NEGATIVE:
        value = -1
    else:
        return None
    if event["type"] == "reaction_removed":
        value = 0
    return Reaction(chat_id=channel, message_id=ts, user_id=user, value=value)


def command_of(text: str) -> str | None:
    return command_name(text)


def backfill_root(envelope: Envelope) -> str | None:
    """The thread root to fetch history for when a mention arrives inside an existing thread.

    Only a human's addressed message that is a reply (its ``ts`` is not the root) qualifies; the
    adapter fetches only if the core does not know the session yet.
    """
    root = envelope.key.thread_id
    if (
        envelope.kind is EventKind.MESSAGE
        and not envelope.backfill
        and envelope.trigger is Trigger.ALWAYS
        and root is not None
        and root != envelope.message_id
    ):
        return root
    return None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _sent_at(ts: str) -> datetime | None:
    try:
        return datetime.fromtimestamp(float(ts), tz=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _sender(message: Mapping[str, Any]) -> Sender:
    user = _str(message.get("user"))
    bot_id = _str(message.get("bot_id"))
    is_bot = bot_id is not None or message.get("subtype") == "bot_message"
    name: str | None = None
    profile = message.get("user_profile")
    if isinstance(profile, Mapping):
        name = _str(profile.get("display_name")) or _str(profile.get("real_name"))
    bot_profile = message.get("bot_profile")
    if name is None and isinstance(bot_profile, Mapping):
        name = _str(bot_profile.get("name"))
    if name is None:
        name = _str(message.get("username"))
    return Sender(id=user or bot_id or "unknown", name=name, is_bot=is_bot)


def _is_own(message: Mapping[str, Any], me: BotIdentity) -> bool:
    user = _str(message.get("user"))
    bot_id = _str(message.get("bot_id"))
    return (user is not None and user == me.user_id) or (
        bot_id is not None and me.bot_id is not None and bot_id == me.bot_id
    )


def facts_of(
    message: Mapping[str, Any], *, key: SessionKey, me: BotIdentity, is_app_mention: bool = False
) -> Facts:
    """What a message is, for the answer policy: nothing here decides."""
    raw_text, ts = message.get("text"), _str(message.get("ts"))
    thread_ts = _str(message.get("thread_ts"))
    text = raw_text if isinstance(raw_text, str) else ""
    sender = _sender(message)
    return Facts(
        place=key,
        person=sender.id,
        direct=is_dm_channel(key.chat_id, message.get("channel_type")),
        mentioned=is_app_mention or mention_pattern(me.user_id).search(text) is not None,
        thread_reply=thread_ts is not None and thread_ts != ts,
        from_bot=sender.is_bot,
        from_self=_is_own(message, me),
    )


def _attachments(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    files = message.get("files")
    if not isinstance(files, list):
        return ()
    out: list[Attachment] = []
    for item in files:
        if not isinstance(item, Mapping):
            continue
        mime = _str(item.get("mimetype"))
        size = item.get("size")
        out.append(
            Attachment(
                kind="image" if mime is not None and mime.startswith("image/") else "file",
                name=_str(item.get("name")) or _str(item.get("title")),
                url=_str(item.get("url_private")),
                mime_type=mime,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                file_id=_str(item.get("id")),
            )
        )
    return tuple(out)


# --- extraction ----------------------------------------------------------------------------


def extract_event(payload: object, *, me: BotIdentity) -> Extracted:
    """One Events API body (HTTP) or Socket Mode ``events_api`` payload -> domain value."""
    if not isinstance(payload, Mapping):
        return Rejected(platform=PLATFORM, reason="payload is not a JSON object")
    event_id = _str(payload.get("event_id"))
    kind = payload.get("type")
    if kind != "event_callback":
        # url_verification is answered by the adapter; app_rate_limited and future envelope
        # types are valid deliveries we do nothing with.
        return Ignored(platform=PLATFORM, reason=f"envelope type {kind}", event_id=event_id)
    event = payload.get("event")
    if not isinstance(event, Mapping):
        return Rejected(platform=PLATFORM, reason="event_callback without event", event_id=event_id)
    # The outer team_id is the workspace the app is installed in; in shared channels the inner
    # ``team`` may name the author's workspace, which must not split the session.
    team_id = _str(payload.get("team_id")) or _str(event.get("team"))
    if team_id is None:
        return Rejected(platform=PLATFORM, reason="event without team_id", event_id=event_id)
    event_type = event.get("type")
    if event_type == "app_mention":
        return _message(event, team_id=team_id, event_id=event_id, me=me, is_app_mention=True)
    if event_type == "message":
        return _message_event(event, team_id=team_id, event_id=event_id, me=me)
    if event_type == "agent_session_stopped":
        return _stop_pressed(event, team_id=team_id, event_id=event_id)
    return Ignored(platform=PLATFORM, reason=f"event type {event_type}", event_id=event_id)


def _message_event(
    event: Mapping[str, Any],
    *,
    team_id: str,
    event_id: str | None,
    me: BotIdentity,
) -> Extracted:
    subtype = event.get("subtype")
    if subtype is not None and not isinstance(subtype, str):
        # a malformed payload (a fuzzed list subtype was unhashable below)
        return Ignored(platform=PLATFORM, reason="subtype is not a string", event_id=event_id)
    # message_changed / message_deleted are themselves ``hidden``: handle them before the
    # hidden check.
    if subtype == "message_changed":
        return _edit(event, team_id=team_id, event_id=event_id, me=me)
    if subtype == "message_deleted":
        return _delete(event, team_id=team_id, event_id=event_id, me=me)
    if event.get("hidden") is True or subtype == "message_replied":
        # message_replied arrives WITHOUT subtype over the Events API (platforms.md §2.5).
        return Ignored(platform=PLATFORM, reason="hidden notification", event_id=event_id)
    if subtype is not None and subtype != "bot_message" and subtype not in _CONVERSATIONAL_SUBTYPES:
        return Ignored(platform=PLATFORM, reason=f"subtype {subtype}", event_id=event_id)
    if _str(event.get("user")) is None and _str(event.get("bot_id")) is None:
        # A notification shape without an author (same trap as message_replied): never route it.
        return Ignored(platform=PLATFORM, reason="message without author", event_id=event_id)
    return _message(event, team_id=team_id, event_id=event_id, me=me, is_app_mention=False)


def _message(
    event: Mapping[str, Any],
    *,
    team_id: str,
    event_id: str | None,
    me: BotIdentity,
    is_app_mention: bool,
) -> Extracted:
    channel = _str(event.get("channel"))
    ts = _str(event.get("ts"))
    if channel is None or ts is None or not _TS_RE.match(ts):
        return Rejected(
            platform=PLATFORM, reason="message without channel or ts", event_id=event_id
        )
    sender = _sender(event)
    thread_ts = _str(event.get("thread_ts"))
    is_dm = is_dm_channel(channel, event.get("channel_type"))
    key, target = route(team_id=team_id, channel=channel, ts=ts, thread_ts=thread_ts, is_dm=is_dm)
    if not sender.is_bot and sender.id:
        target = replace(target, extra={RECIPIENT: sender.id})
    raw_text = event.get("text")
    text = raw_text if isinstance(raw_text, str) else ""
    facts = facts_of(event, key=key, me=me, is_app_mention=is_app_mention)
    mentioned, is_reply = facts.mentioned, facts.thread_reply
    body = strip_leading_mention(text, me) if mentioned else text
    metadata: dict[str, Any] = {"channel_type": "im" if is_dm else _str(event.get("channel_type"))}
    if _str(event.get("subtype")):
        metadata["subtype"] = event["subtype"]
    if mentioned:
        metadata["mentioned"] = True
    return Envelope(
        key=key,
        target=target,
        message_id=ts,
        text=body,
        sender=sender,
        event_id=event_id,
        # the core's ingress decides the trigger, and whether the command counts
        command=command_of(body),
        reply_to_id=thread_ts if is_reply else None,
        attachments=_attachments(event),
        sent_at=_sent_at(ts),
        place=Place(direct=is_dm),
        metadata=metadata,
        facts=facts,
    )


def _stop_pressed(event: Mapping[str, Any], *, team_id: str, event_id: str | None) -> Extracted:
    """``agent_session_stopped``: Slack's stop button of the thread's agent session was
    pressed. It is that person's ``/stop`` in that thread, and the core treats it as one: the
    answer being written there stops (a queued one is not answered), and with nothing running
    the person is told so. Slack has already stopped the streams it lists in
    ``streaming_message_ts``; the final text of each is written over it as usual."""
    channel, thread_ts = _str(event.get("channel")), _str(event.get("thread_ts"))
    user, pressed = _str(event.get("user")), _str(event.get("event_ts"))
    if channel is None or thread_ts is None or not _TS_RE.match(thread_ts) or pressed is None:
        return Rejected(
            platform=PLATFORM, reason="agent_session_stopped without its thread", event_id=event_id
        )
    is_dm = is_dm_channel(channel, None)
    key, target = route(
        team_id=team_id, channel=channel, ts=thread_ts, thread_ts=thread_ts, is_dm=is_dm
    )
    sender = Sender(id=user or "unknown")
    streams = event.get("streaming_message_ts")
    return Envelope(
        key=key,
        target=target,
        # no message of its own: the press is named by its event_ts (a retry names it again)
        message_id=f"stop@{pressed}",
        text="/stop",
        sender=sender,
        event_id=event_id,
        command="stop",
        reply_to_id=thread_ts,
        sent_at=_sent_at(pressed),
        place=Place(direct=is_dm),
        metadata={
            "stop_button": True,
            "streaming_message_ts": [t for t in streams if isinstance(t, str)]
            if isinstance(streams, list)
            else [],
        },
        # the app's own button, in a thread it works in: addressed to it
        facts=Facts(
            place=key, person=user, direct=is_dm, mentioned=True, command=True, thread_reply=True
        ),
    )


def _edit(
    event: Mapping[str, Any],
    *,
    team_id: str,
    event_id: str | None,
    me: BotIdentity,
) -> Extracted:
    inner = event.get("message")
    channel = _str(event.get("channel"))
    if not isinstance(inner, Mapping) or channel is None:
        return Rejected(
            platform=PLATFORM, reason="message_changed without message", event_id=event_id
        )
    ts = _str(inner.get("ts"))
    if ts is None:
        return Rejected(platform=PLATFORM, reason="message_changed without ts", event_id=event_id)
    is_dm = is_dm_channel(channel, event.get("channel_type"))
    key, target = route(
        team_id=team_id, channel=channel, ts=ts, thread_ts=_str(inner.get("thread_ts")), is_dm=is_dm
    )
    facts = facts_of(inner, key=key, me=me)
    previous = event.get("previous_message")
    text = inner.get("text") if isinstance(inner.get("text"), str) else ""
    if isinstance(previous, Mapping) and previous.get("text") == text:
        # Unfurls and reply-count updates re-send the message unchanged: not an edit.
        return Ignored(
            platform=PLATFORM,
            reason="message_changed without text change",
            event_id=event_id,
            facts=facts,
            kind=EventKind.EDIT,
        )
    # the edited text in the form the message was stored in: the leading mention dropped
    body = strip_leading_mention(str(text), me) if facts.mentioned else str(text)
    return Envelope(
        key=key,
        target=target,
        message_id=ts,
        text=body,
        sender=_sender(inner),
        event_id=event_id,
        kind=EventKind.EDIT,
        trigger=Trigger.NEVER,  # never re-answer an edit blindly
        sent_at=_sent_at(ts),
        metadata={"edited_at": _str(event.get("ts"))},
        facts=facts,
    )


def _delete(
    event: Mapping[str, Any],
    *,
    team_id: str,
    event_id: str | None,
    me: BotIdentity,
) -> Extracted:
    channel = _str(event.get("channel"))
    previous = event.get("previous_message")
    previous = previous if isinstance(previous, Mapping) else {}
    ts = _str(event.get("deleted_ts")) or _str(previous.get("ts"))
    if channel is None or ts is None:
        return Rejected(
            platform=PLATFORM, reason="message_deleted without channel or ts", event_id=event_id
        )
    is_dm = is_dm_channel(channel, event.get("channel_type"))
    key, target = route(
        team_id=team_id,
        channel=channel,
        ts=ts,
        thread_ts=_str(previous.get("thread_ts")),
        is_dm=is_dm,
    )
    # the deleted message's author may be unknown; the place is enough to refuse it
    facts = Facts(place=key, person=None, from_self=_is_own(previous, me))
    return Envelope(
        key=key,
        target=target,
        message_id=ts,
        text="",
        sender=_sender(previous),
        event_id=event_id,
        kind=EventKind.DELETE,
        trigger=Trigger.NEVER,
        metadata={"deleted_at": _str(event.get("ts"))},
        facts=facts,
    )


def extract_history(
    message: object,
    *,
    team_id: str,
    channel: str,
    is_dm: bool,
    me: BotIdentity,
) -> Envelope | Ignored:
    """One ``conversations.replies`` message -> a backfill row (context only, never answered).

    Backfill rows have no ``event_id`` (no delivery); the inbox dedupes them on ``ts``, so two
    concurrent first contacts (app_mention + message) store the history once.
    """
    if not isinstance(message, Mapping):
        return Ignored(platform=PLATFORM, reason="history item is not an object")
    ts = _str(message.get("ts"))
    subtype = message.get("subtype")
    if subtype is not None and not isinstance(subtype, str):
        return Ignored(platform=PLATFORM, reason="history subtype is not a string")
    if ts is None or not _TS_RE.match(ts):
        return Ignored(platform=PLATFORM, reason="history item without ts")
    if subtype is not None and subtype != "bot_message" and subtype not in _CONVERSATIONAL_SUBTYPES:
        return Ignored(platform=PLATFORM, reason=f"history subtype {subtype}")
    if _is_own(message, me):
        # Our own earlier posts are not user input; the core has no role for them here.
        return Ignored(platform=PLATFORM, reason="own message")
    if _str(message.get("user")) is None and _str(message.get("bot_id")) is None:
        return Ignored(platform=PLATFORM, reason="history item without author")
    thread_ts = _str(message.get("thread_ts"))
    key, target = route(team_id=team_id, channel=channel, ts=ts, thread_ts=thread_ts, is_dm=is_dm)
    text = message.get("text")
    return Envelope(
        key=key,
        target=target,
        message_id=ts,
        text=text if isinstance(text, str) else "",
        sender=_sender(message),
        event_id=None,
        trigger=Trigger.NEVER,
        reply_to_id=thread_ts if thread_ts is not None and thread_ts != ts else None,
        attachments=_attachments(message),
        sent_at=_sent_at(ts),
        backfill=True,
        place=Place(direct=is_dm),
        metadata={"backfill": True},
        # context of the thread it came from: only the place counts, not who wrote it
        facts=Facts(place=key, person=None, from_bot=_sender(message).is_bot),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantThread:
    """A person opened the app's assistant container: ``assistant_thread_started``
    (docs.slack.dev/reference/events/assistant_thread_started)."""

    key: SessionKey
    user_id: str | None


def assistant_thread_of(payload: object) -> AssistantThread | None:
    """The thread an ``assistant_thread_started`` event opened, else ``None``. The thread
    lives in the app's DM with the person; its session is that DM thread's."""
    if not isinstance(payload, Mapping) or payload.get("type") != "event_callback":
        return None
    event = payload.get("event")
    if not isinstance(event, Mapping) or event.get("type") != "assistant_thread_started":
        return None
    thread = event.get("assistant_thread")
    if not isinstance(thread, Mapping):
        return None
    team_id = _str(payload.get("team_id"))
    channel, thread_ts = _str(thread.get("channel_id")), _str(thread.get("thread_ts"))
    if team_id is None or channel is None or thread_ts is None or not _TS_RE.match(thread_ts):
        return None
    key, _ = route(team_id=team_id, channel=channel, ts=thread_ts, thread_ts=thread_ts, is_dm=True)
    return AssistantThread(key=key, user_id=_str(thread.get("user_id")))
