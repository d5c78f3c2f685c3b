"""Pure extraction of Mattermost reactions: thumbs up/down on a bot reply is that reply's
feedback, ✅/❌ on an approval card its decision. No I/O; which post a reaction is on is the
core's question."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.mattermost.context import ExtractContext
from gateway.core.domain import STOP_EMOJI, Reaction

#: reactions that are feedback on a bot reply (Mattermost emoji names; skin tones stripped)
_POSITIVE = frozenset({"+1", "thumbsup"})
_NEGATIVE = frozenset({"-1", "thumbsdown"})
REACTION_EVENTS = frozenset({"reaction_added", "reaction_removed"})
_SKIN_TONE = re.compile(r"_(?:light|medium_light|medium|medium_dark|dark)_skin_tone$")


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
    if found.emoji == STOP_EMOJI:
        if not found.added:
            return None
        return Reaction(
            chat_id=found.channel, message_id=found.post, user_id=found.user, value=0, stop=True
        )
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
