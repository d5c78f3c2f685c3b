"""Pure extraction: a Mattermost websocket event or REST post -> Envelope | Ignored | Rejected.

No I/O here. The rules (platforms.md §0, §3):

* Session key. Channels (``O``/``P``): ``(server, channel_id, root)`` with
  ``root = post.root_id or post.id``. DMs (``D``) and group DMs (``G``): one session per
  channel (``thread_id=None``) unless the post is in a thread (``root_id`` set).
* Reply target. ``thread_id`` is the root post id to send as ``root_id`` - never a reply's own
  id (the server answers 400 ``api.post.create_post.root_id.app_error``). A top-level DM post is
  answered with a new top-level post in the DM (``thread_id=None``): the DM is one session, so
  threading each answer under its question would scatter one conversation over many threads.
* ``posted.data.post`` is a JSON *string*; ``mentions`` is a JSON-string array holding at most
  the receiving user's id (server ``web_broadcast_hooks.go``: "the client expects this field to
  be stringified").

Who is answered is not decided here: ``facts_of`` reports what the post is and
``gateway.inbound.policy`` decides, for every platform alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from adapters.mattermost.settings import MattermostSettings
from gateway.core.commands import command_name
from gateway.core.domain import (
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
from gateway.core.settings import Settings
from gateway.inbound.policy import AnswerRules, PlaceAnswerRule, Shorthand, decide, rules_for

PLATFORM = "mattermost"

#: websocket events that carry a post; everything else (hello, typing, status_change,
#: channel_viewed, ...) is protocol or presence noise
POST_EVENTS = frozenset({"posted", "post_edited", "post_deleted"})

#: reactions that are feedback on a bot reply (Mattermost emoji names; skin tones stripped)
_POSITIVE = frozenset({"+1", "thumbsup"})
_NEGATIVE = frozenset({"-1", "thumbsdown"})
REACTION_EVENTS = frozenset({"reaction_added", "reaction_removed"})
_SKIN_TONE = re.compile(r"_(?:light|medium_light|medium|medium_dark|dark)_skin_tone$")
_CHANNEL_TYPES = frozenset({"O", "P", "D", "G"})


@dataclass(frozen=True, slots=True, kw_only=True)
class BotIdentity:
    """Who we are on the server (``GET /api/v4/users/me``)."""

    user_id: str
    username: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractContext:
    scope: str
    bot: BotIdentity
    #: who is answered (``answer_rules`` maps the settings into them)
    rules: AnswerRules = field(default_factory=AnswerRules)


def answer_rules(
    settings: MattermostSettings,
    core: Settings | None = None,
    *,
    answer_bots: bool | None = None,
    place_answers_all: PlaceAnswerRule | None = None,
) -> AnswerRules:
    """The answer policy's rules for Mattermost: the ``GATEWAY_*`` lists, with
    ``MATTERMOST_*`` ones as their shorthand (``gateway.inbound.policy``)."""
    return rules_for(
        core,
        Shorthand(
            platform=PLATFORM,
            chat_word="channel",
            allowed_chats=settings.mattermost_allowed_channels,
            allowed_chats_name="MATTERMOST_ALLOWED_CHANNELS",
            allowed_users=settings.mattermost_allowed_users,
            allowed_users_name="MATTERMOST_ALLOWED_USERS",
            answer_all_chats=settings.mattermost_answer_all_channels,
            require_mention=settings.mattermost_require_mention,
        ),
        answer_bots=answer_bots,
        place_answers_all=place_answers_all,
    )


# --- small pure helpers -------------------------------------------------------------------


def decode_post(value: object) -> dict[str, Any] | None:
    """``data.post`` as a dict. Real servers send a JSON string; a dict is accepted too."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # deep nesting (found by fuzzing)
            return None
    if isinstance(value, dict) and all(
        isinstance(value.get(k), str) and value.get(k) for k in ("id", "channel_id")
    ):
        return value
    return None


#: a Mattermost id: 26 lower-case letters and digits (server model/utils.go NewId)
_MATTERMOST_ID = re.compile(r"[a-z0-9]{26}")


def post_of(event: Mapping[str, Any]) -> dict[str, Any] | None:
    """The decoded post of a post event, or ``None`` (for cursor bookkeeping). A post whose
    ids are not Mattermost ids is not bookkept: it can never be fetched again, and its channel
    id must not become a cursor (fuzzed frames with NUL in ids wedged the handler)."""
    data = event.get("data")
    if not isinstance(data, Mapping):
        return None
    post = decode_post(data.get("post"))
    if post is None or not all(_MATTERMOST_ID.fullmatch(post[k]) for k in ("id", "channel_id")):
        return None
    return post


def decode_mentions(value: object) -> tuple[str, ...]:
    """``data.mentions``: a stringified JSON array of user ids (absent when not mentioned)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return ()
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def _mention_pattern(username: str) -> re.Pattern[str]:
    # Mattermost usernames: letters, digits, ".", "-", "_". "@bot." / "@bot," still mention
    # "bot" (trailing punctuation), "@bot.smith" or "@bot-2" is another user, "a@bot" is not.
    return re.compile(rf"(?<![\w@.\-])@{re.escape(username)}(?![\w\-]|\.[\w\-])", re.IGNORECASE)


def mentions_bot(text: str, mentions: Sequence[str], bot: BotIdentity) -> bool:
    return bot.user_id in mentions or bool(_mention_pattern(bot.username).search(text))


def parse_command(text: str, bot: BotIdentity) -> str | None:
    """``/new`` or ``/help``, optionally after ``@bot`` (a leading space is how people send
    text starting with ``/`` past Mattermost's own slash-command handling)."""
    rest = text.strip()
    lead = re.match(rf"@{re.escape(bot.username)}[:,]?\s+", rest, re.IGNORECASE)
    if lead:
        rest = rest[lead.end() :]
    return command_name(rest)


def session_key(
    *, scope: str, channel_id: str, channel_type: str, post_id: str, root_id: str
) -> SessionKey:
    """The one place the Mattermost session rule lives."""
    if channel_type in ("D", "G"):
        thread: str | None = root_id or None
    else:
        thread = root_id or post_id
    return SessionKey(platform=PLATFORM, scope=scope, chat_id=channel_id, thread_id=thread)


def reply_target(
    *, scope: str, channel_id: str, channel_type: str, post_id: str, root_id: str
) -> ReplyTarget:
    """Where the answer goes: ``thread_id`` is the root id to send (see module doc)."""
    key = session_key(
        scope=scope,
        channel_id=channel_id,
        channel_type=channel_type,
        post_id=post_id,
        root_id=root_id,
    )
    return ReplyTarget(
        platform=PLATFORM,
        scope=scope,
        chat_id=channel_id,
        thread_id=key.thread_id,
        reply_to_message_id=post_id,
    )


def facts_of(
    *,
    key: SessionKey,
    user_id: str,
    channel_type: str,
    root_id: str,
    mentioned: bool,
    from_bot: bool,
    bot: BotIdentity,
) -> Facts:
    """What a post is, for the answer policy: nothing here decides. Group DMs (``G``) are
    not direct: several people talk there, as in a channel."""
    return Facts(
        place=key,
        person=user_id,
        direct=channel_type == "D",
        mentioned=mentioned,
        thread_reply=bool(root_id),
        from_bot=from_bot,
        from_self=user_id == bot.user_id,
    )


def _millis(value: object) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, ValueError, OSError):  # out of range (found by fuzzing)
            return None
    return None


def _attachments(post: Mapping[str, Any]) -> tuple[Attachment, ...]:
    metadata = post.get("metadata")
    files = metadata.get("files") if isinstance(metadata, Mapping) else None
    if isinstance(files, list) and files:
        out: list[Attachment] = []
        for f in files:
            if not isinstance(f, Mapping):
                continue
            mime = f.get("mime_type") if isinstance(f.get("mime_type"), str) else None
            size = f.get("size")
            out.append(
                Attachment(
                    kind="image" if mime and mime.startswith("image/") else "file",
                    name=f.get("name") if isinstance(f.get("name"), str) else None,
                    url=f"/api/v4/files/{f['id']}" if isinstance(f.get("id"), str) else None,
                    mime_type=mime,
                    size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                    file_id=f["id"] if isinstance(f.get("id"), str) else None,
                )
            )
        return tuple(out)
    ids = post.get("file_ids")
    if isinstance(ids, list):
        return tuple(
            Attachment(kind="file", url=f"/api/v4/files/{i}", file_id=i)
            for i in ids
            if isinstance(i, str)
        )
    return ()


def _str(post: Mapping[str, Any], key: str) -> str:
    value = post.get(key)
    return value if isinstance(value, str) else ""


# --- the extraction ------------------------------------------------------------------------


def extract_post(
    post: Mapping[str, Any],
    *,
    ctx: ExtractContext,
    channel_type: str,
    kind: EventKind = EventKind.MESSAGE,
    mentions: Sequence[str] = (),
    sender_name: str | None = None,
    team_id: str | None = None,
    channel_name: str | None = None,
    source: str = "websocket",
) -> Extracted:
    """One post (decoded) -> Envelope | Ignored | Rejected. Shared by the websocket path and
    the REST reconciliation so both produce identical envelopes (and ids the inbox dedupes)."""
    post_id = _str(post, "id")
    channel_id = _str(post, "channel_id")
    user_id = _str(post, "user_id")
    if not post_id or not channel_id or not user_id:
        return Rejected(platform=PLATFORM, reason="post without id, channel_id or user_id")
    if channel_type not in _CHANNEL_TYPES:
        # post_edited / post_deleted carry no channel type; the adapter looks it up and
        # falls back to "O" (the channel rule) when the server cannot tell us.
        channel_type = "O"
    root_id = _str(post, "root_id")
    text = _str(post, "message")
    props = post.get("props")
    props = props if isinstance(props, Mapping) else {}
    # props.from_bot is set by the server for bot accounts; webhooks post as from_webhook
    from_bot = props.get("from_bot") == "true" or props.get("from_webhook") == "true"
    scope = ctx.scope
    key = session_key(
        scope=scope,
        channel_id=channel_id,
        channel_type=channel_type,
        post_id=post_id,
        root_id=root_id,
    )
    facts = facts_of(
        key=key,
        user_id=user_id,
        channel_type=channel_type,
        root_id=root_id,
        mentioned=mentions_bot(text, mentions, ctx.bot),
        from_bot=from_bot,
        bot=ctx.bot,
    )
    decision = decide(facts, ctx.rules)
    if decision.ignored:
        reason = "own post" if facts.from_self else decision.reason
        return Ignored(platform=PLATFORM, reason=reason, event_id=f"post:{post_id}")
    post_type = _str(post, "type")
    if post_type.startswith("system_"):
        # joins, header changes, ... are server notices, not conversation
        return Ignored(
            platform=PLATFORM, reason=f"system post {post_type}", event_id=f"post:{post_id}"
        )
    target = reply_target(
        scope=scope,
        channel_id=channel_id,
        channel_type=channel_type,
        post_id=post_id,
        root_id=root_id,
    )
    name = sender_name.lstrip("@") if sender_name else None
    override = props.get("override_username")
    if isinstance(override, str) and override:
        name = override
    sender = Sender(id=user_id, name=name, is_bot=from_bot)
    create_at = post.get("create_at")
    metadata: dict[str, Any] = {
        "channel_type": channel_type,
        "create_at": create_at if isinstance(create_at, int) else None,
        "source": source,
    }
    if team_id:
        metadata["team_id"] = team_id
    if channel_name:
        metadata["channel_name"] = channel_name
    if root_id:
        metadata["root_id"] = root_id
    # "D" is a direct message; a group message ("G") is named like a channel
    place = Place(direct=channel_type == "D", chat_name=channel_name or None)

    # A command only counts when the post is for us: a stray "/new" in a channel (or another
    # bot's) must not reset a session.
    for_us = kind is EventKind.MESSAGE and decision.trigger is not Trigger.NEVER
    envelope = Envelope(
        key=key,
        target=target,
        message_id=post_id,
        text=text,
        sender=sender,
        event_id=f"post:{post_id}",
        kind=EventKind.MESSAGE,
        trigger=decision.trigger,
        command=parse_command(text, ctx.bot) if for_us else None,
        reply_to_id=root_id or None,
        attachments=_attachments(post),
        sent_at=_millis(create_at),
        place=place,
        metadata=metadata,
        facts=facts,
    )
    if kind is EventKind.EDIT:  # an annotation of the stored post, never answered again
        edit_at = post.get("edit_at")
        return replace(
            envelope,
            event_id=f"edit:{post_id}:{edit_at if isinstance(edit_at, int) else 0}",
            kind=EventKind.EDIT,
            trigger=Trigger.NEVER,
            sent_at=_millis(edit_at),
        )
    if kind is EventKind.DELETE:
        return replace(
            envelope,
            text="",
            event_id=f"delete:{post_id}",
            kind=EventKind.DELETE,
            trigger=Trigger.NEVER,
            attachments=(),
            sent_at=_millis(post.get("delete_at")),
        )
    return envelope


@dataclass(frozen=True, slots=True, kw_only=True)
class _ReactionEvent:
    """The fields of a ``reaction_added`` / ``reaction_removed`` event by someone other than
    the bot; ``emoji`` without its skin tone."""

    added: bool
    channel: str
    post: str
    user: str
    emoji: str


def _reaction_event(event: Mapping[str, Any], *, ctx: ExtractContext) -> _ReactionEvent | None:
    """``data.reaction`` is a JSON string like ``data.post`` (server reaction.go); the channel
    is in it, or in the broadcast."""
    name = event.get("event")
    data = event.get("data")
    if name not in REACTION_EVENTS or not isinstance(data, Mapping):
        return None
    raw = data.get("reaction")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return None
    if not isinstance(raw, Mapping):
        return None
    user, post, emoji = raw.get("user_id"), raw.get("post_id"), raw.get("emoji_name")
    channel = raw.get("channel_id")
    if not channel:
        broadcast = event.get("broadcast")
        channel = broadcast.get("channel_id") if isinstance(broadcast, Mapping) else None
    if not (
        isinstance(user, str)
        and user
        and isinstance(post, str)
        and post
        and isinstance(emoji, str)
        and isinstance(channel, str)
        and channel
    ):
        return None
    if user == ctx.bot.user_id:
        return None
    return _ReactionEvent(
        added=name == "reaction_added",
        channel=channel,
        post=post,
        user=user,
        emoji=_SKIN_TONE.sub("", emoji),
    )


def reaction_of(event: Mapping[str, Any], *, ctx: ExtractContext) -> Reaction | None:
    """``reaction_added`` / ``reaction_removed`` with a thumbs up/down by someone else, else
    ``None``."""
    found = _reaction_event(event, ctx=ctx)
    if found is None:
        return None
    if found.emoji in _POSITIVE:
        value = 1
    elif found.emoji in _NEGATIVE:
        value = -1
    else:
        return None
    return Reaction(
        chat_id=found.channel,
        message_id=found.post,
        user_id=found.user,
        value=value if found.added else 0,
    )


def extract_event(
    event: Mapping[str, Any],
    *,
    ctx: ExtractContext,
    channel_type_hint: str | None = None,
) -> Extracted:
    """One websocket frame -> Envelope | Ignored | Rejected.

    ``channel_type_hint`` supplies the channel type for ``post_edited``/``post_deleted``,
    whose data carries only the post (the adapter remembers types it has seen)."""
    name = event.get("event")
    if not isinstance(name, str) or not name:
        if "seq_reply" in event:
            # {"status": "OK", "seq_reply": n}: the answer to one of our actions
            return Ignored(platform=PLATFORM, reason="reply to a client action")
        return Rejected(platform=PLATFORM, reason="frame without an event name")
    if name not in POST_EVENTS:
        return Ignored(platform=PLATFORM, reason=f"event {name}")
    data = event.get("data")
    if not isinstance(data, Mapping):
        return Rejected(platform=PLATFORM, reason=f"{name} without data")
    post = decode_post(data.get("post"))
    if post is None:
        return Rejected(platform=PLATFORM, reason=f"{name}: data.post is not a JSON post")
    raw_type = data.get("channel_type")
    channel_type = raw_type if isinstance(raw_type, str) and raw_type else channel_type_hint
    team = data.get("team_id")
    channel_name = data.get("channel_name")
    sender_name = data.get("sender_name")
    kind = {
        "posted": EventKind.MESSAGE,
        "post_edited": EventKind.EDIT,
        "post_deleted": EventKind.DELETE,
    }[name]
    return extract_post(
        post,
        ctx=ctx,
        channel_type=channel_type or "",
        kind=kind,
        mentions=decode_mentions(data.get("mentions")),
        sender_name=sender_name if isinstance(sender_name, str) else None,
        team_id=team if isinstance(team, str) else None,
        channel_name=channel_name if isinstance(channel_name, str) else None,
    )


# --- reconciliation: what one fetched post means since the cursor ---------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Missed:
    """What one post fetched by reconciliation yields. ``events`` are to be submitted in
    order; ``new`` says the post itself was created at or after the cursor (so the cursor
    may move past it once every event is stored, and a failure must hold it)."""

    events: tuple[Extracted, ...]
    new: bool


def missed_since(
    post: Mapping[str, Any],
    *,
    cursor: int,
    ctx: ExtractContext,
    channel_type: str,
    team_id: str | None = None,
) -> Missed:
    """The events a post yields since ``cursor`` (ms; "every post created before it was
    handled"): created after it -> the message; edited after it -> an edit; deleted after
    it -> only the deletion (never answered if we did not see it). A post at the cursor's
    own millisecond may be one we already saw: submitting it again is deduped by the inbox,
    and its edits/deletion still count. A post none of that applies to (an older thread root
    the server adds for context) yields nothing."""
    create_at = _int(post.get("create_at"))
    edit_at = _int(post.get("edit_at"))
    delete_at = _int(post.get("delete_at"))
    new = create_at >= cursor

    def extract(kind: EventKind, **extra: Any) -> Extracted:
        return extract_post(
            post, ctx=ctx, channel_type=channel_type, kind=kind, source="reconcile", **extra
        )

    if delete_at:
        events = (extract(EventKind.DELETE),) if delete_at >= cursor else ()
        return Missed(events=events, new=new)
    created = (extract(EventKind.MESSAGE, team_id=team_id),) if new else ()
    edited = (extract(EventKind.EDIT),) if edit_at >= cursor else ()
    return Missed(events=created + edited, new=new)


def post_order(post: Mapping[str, Any]) -> tuple[int, str]:
    """Sort key for fetched posts: creation time, then id (a stable order in one ms)."""
    return _int(post.get("create_at")), str(post.get("id"))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


#: approval cards: reacting ✅ approves, ❌ denies (Mattermost emoji names)
APPROVE_EMOJIS = frozenset({"white_check_mark", "heavy_check_mark", "ballot_box_with_check"})
DENY_EMOJIS = frozenset({"x", "negative_squared_cross_mark", "heavy_multiplication_x"})
APPROVE_EMOJI_TEXT = ":white_check_mark:"
DENY_EMOJI_TEXT = ":x:"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalReaction:
    chat_id: str
    post_id: str
    user_id: str
    approve: bool


def approval_reaction_of(
    event: Mapping[str, Any], *, ctx: ExtractContext
) -> ApprovalReaction | None:
    """``reaction_added`` of ✅ or ❌ by someone other than the bot, else ``None`` (which post
    it is on, and whether that post is an open approval card, is the core's question)."""
    found = _reaction_event(event, ctx=ctx)
    if found is None or not found.added:
        return None
    if found.emoji not in APPROVE_EMOJIS and found.emoji not in DENY_EMOJIS:
        return None
    return ApprovalReaction(
        chat_id=found.channel,
        post_id=found.post,
        user_id=found.user,
        approve=found.emoji in APPROVE_EMOJIS,
    )
