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

Who is answered is not decided here: ``facts_of`` reports what the post is and the core's
ingress decides (``gateway.inbound.ingress.admit``), for every platform alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from adapters.mattermost.context import BotIdentity as BotIdentity
from adapters.mattermost.context import ExtractContext as ExtractContext
from adapters.mattermost.reactions import APPROVE_EMOJI_TEXT as APPROVE_EMOJI_TEXT
from adapters.mattermost.reactions import DENY_EMOJI_TEXT as DENY_EMOJI_TEXT
from adapters.mattermost.reactions import REACTION_EVENTS as REACTION_EVENTS
from adapters.mattermost.reactions import approval_reaction_of as approval_reaction_of
from adapters.mattermost.reactions import reaction_of as reaction_of
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
    Rejected,
    ReplyTarget,
    Sender,
    SessionKey,
    Trigger,
)
from gateway.core.plugins import Shorthand

PLATFORM = "mattermost"

#: websocket events that carry a post; everything else (hello, typing, status_change,
#: channel_viewed, ...) is protocol or presence noise
POST_EVENTS = frozenset({"posted", "post_edited", "post_deleted"})

_CHANNEL_TYPES = frozenset({"O", "P", "D", "G"})


def answer_settings(settings: MattermostSettings) -> Shorthand:
    """Mattermost's own answer settings (``MATTERMOST_*``), as shorthands of the one
    vocabulary: the plugin declares them, the core's ingress applies them
    (``gateway.inbound.policy``)."""
    return Shorthand(
        platform=PLATFORM,
        chat_word="channel",
        own_word="post",
        allowed_chats=settings.mattermost_allowed_channels,
        allowed_chats_name="MATTERMOST_ALLOWED_CHANNELS",
        allowed_users=settings.mattermost_allowed_users,
        allowed_users_name="MATTERMOST_ALLOWED_USERS",
        answer_all_chats=settings.mattermost_answer_all_channels,
        require_mention=settings.mattermost_require_mention,
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
    # where the post is: its session, and where its answer goes
    where = {
        "scope": ctx.scope,
        "channel_id": channel_id,
        "channel_type": channel_type,
        "post_id": post_id,
        "root_id": root_id,
    }
    key = session_key(**where)
    facts = facts_of(
        key=key,
        user_id=user_id,
        channel_type=channel_type,
        root_id=root_id,
        mentioned=mentions_bot(text, mentions, ctx.bot),
        from_bot=from_bot,
        bot=ctx.bot,
    )
    post_type = _str(post, "type")
    if post_type.startswith("system_"):
        # joins, header changes, ... are server notices, not conversation (the answer
        # policy's refusal, if any, is still the reason kept)
        return Ignored(
            platform=PLATFORM,
            reason=f"system post {post_type}",
            event_id=f"post:{post_id}",
            facts=facts,
            kind=kind,
        )
    envelope = Envelope(
        key=key,
        target=reply_target(**where),
        message_id=post_id,
        text=text,
        sender=_sender(user_id, sender_name, props, from_bot=from_bot),
        event_id=f"post:{post_id}",
        kind=EventKind.MESSAGE,
        # the core's ingress decides the trigger, and drops the command of a post that is not
        # for us (a stray "/new" in a channel, or another bot's, must not reset a session)
        command=parse_command(text, ctx.bot) if kind is EventKind.MESSAGE else None,
        reply_to_id=root_id or None,
        attachments=_attachments(post),
        sent_at=_millis(post.get("create_at")),
        # "D" is a direct message; a group message ("G") is named like a channel
        place=Place(direct=channel_type == "D", chat_name=channel_name or None),
        metadata=_metadata(post, channel_type, source, team_id, channel_name, root_id),
        facts=facts,
    )
    return _as_kind(envelope, post, kind)


def _sender(
    user_id: str, sender_name: str | None, props: Mapping[str, Any], *, from_bot: bool
) -> Sender:
    name = sender_name.lstrip("@") if sender_name else None
    override = props.get("override_username")
    if isinstance(override, str) and override:
        name = override
    return Sender(id=user_id, name=name, is_bot=from_bot)


def _metadata(
    post: Mapping[str, Any],
    channel_type: str,
    source: str,
    team_id: str | None,
    channel_name: str | None,
    root_id: str,
) -> dict[str, Any]:
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
    return metadata


def _as_kind(envelope: Envelope, post: Mapping[str, Any], kind: EventKind) -> Envelope:
    """A post's envelope as its edit or deletion: an annotation of the stored post, never
    answered again."""
    post_id = envelope.message_id
    if kind is EventKind.EDIT:
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
