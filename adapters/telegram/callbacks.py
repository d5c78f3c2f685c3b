"""Pure extraction of what is not a message: a 👍/👎 reaction (feedback on a bot reply) and the
press of an approval card's inline button (a ``callback_query``). No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.telegram.kinds import is_int
from gateway.core.domain import Reaction

_REACTION_VALUES: Mapping[str, int] = {"👍": 1, "👎": -1}


def reaction_of(update: Mapping[str, Any]) -> Reaction | None:
    """A ``message_reaction`` update by a user (Bot API 7.0; groups need the bot to be an
    admin) whose new reactions include 👍 or 👎, or that removed them; else ``None``."""
    reaction = update.get("message_reaction")
    if not isinstance(reaction, Mapping):
        return None
    chat, user, message_id = reaction.get("chat"), reaction.get("user"), reaction.get("message_id")
    if not (
        isinstance(chat, Mapping) and isinstance(user, Mapping) and isinstance(message_id, int)
    ):
        return None  # anonymous (chat-sender) reactions carry no user to attribute them to

    def values(key: str) -> list[int]:
        items = reaction.get(key)
        if not isinstance(items, list):
            return []
        return [
            _REACTION_VALUES[r["emoji"]]
            for r in items
            if isinstance(r, Mapping)
            and r.get("type") == "emoji"
            and r.get("emoji") in _REACTION_VALUES
        ]

    new, old = values("new_reaction"), values("old_reaction")
    if not new and not old:
        return None
    return Reaction(
        chat_id=str(chat.get("id")),
        message_id=str(message_id),
        user_id=str(user.get("id")),
        value=new[-1] if new else 0,
    )


#: ``callback_data`` of the approval buttons: ``apv:<opaque id>:y|n`` (<= 64 bytes)
APPROVAL_PREFIX = "apv:"


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalPress:
    """A press of an approval card's inline button (a ``callback_query`` update)."""

    query_id: str
    approval_id: str
    approve: bool
    user_id: str
    chat_id: str
    #: the forum topic of the card, as the platform reports it (None: no topic)
    thread_id: str | None
    message_id: str


def callback_of(update: Mapping[str, Any]) -> tuple[str, ApprovalPress | None] | None:
    """For a ``callback_query`` update: its query id (every query must be answered, or the
    client shows a spinner) and the approval press it carries, if it is one; else ``None``."""
    query = update.get("callback_query")
    if not isinstance(query, Mapping) or not isinstance(query.get("id"), str):
        return None
    query_id = str(query["id"])
    data, user, message = query.get("data"), query.get("from"), query.get("message")
    if not (
        isinstance(data, str)
        and data.startswith(APPROVAL_PREFIX)
        and isinstance(user, Mapping)
        and isinstance(message, Mapping)
        and isinstance(message.get("chat"), Mapping)
        and is_int(message.get("message_id"))
    ):
        return query_id, None
    approval_id, _, choice = data[len(APPROVAL_PREFIX) :].rpartition(":")
    if not approval_id or choice not in ("y", "n"):
        return query_id, None
    topic = message.get("message_thread_id")
    in_topic = is_int(topic) and bool(message.get("is_topic_message"))
    return query_id, ApprovalPress(
        query_id=query_id,
        approval_id=approval_id,
        approve=choice == "y",
        user_id=str(user.get("id")),
        chat_id=str(message["chat"].get("id")),
        thread_id=str(topic) if in_topic else None,
        message_id=str(message["message_id"]),
    )
