"""Pure extraction of the button presses on the bot's messages (``block_actions``
interactions): an approval card's Approve / Deny, an answer's feedback buttons."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _press(
    payload: Mapping[str, Any], action_ids: tuple[str, ...]
) -> tuple[Mapping[str, Any], Mapping[str, Any], object, object] | None:
    """A ``block_actions`` press of one of ``action_ids``: its first action, the user, and
    the raw ``channel`` and ``container`` (checked by the caller); else ``None``."""
    if payload.get("type") != "block_actions":
        return None
    actions, user = payload.get("actions"), payload.get("user")
    if not (isinstance(actions, list) and actions and isinstance(user, Mapping)):
        return None
    action = actions[0]
    if not isinstance(action, Mapping) or action.get("action_id") not in action_ids:
        return None
    return action, user, payload.get("channel"), payload.get("container")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalAction:
    """A press of an approval card's button (a ``block_actions`` interaction)."""

    approval_id: str
    approve: bool
    user_id: str
    channel_id: str
    #: the card's thread (its root ts) and the card's own ts, as Slack reports them
    thread_ts: str | None
    message_ts: str | None


def approval_action_of(
    payload: Mapping[str, Any], *, approve_action: str, deny_action: str
) -> ApprovalAction | None:
    """The approval press in an interaction payload, else ``None`` (other interactions)."""
    pressed = _press(payload, (approve_action, deny_action))
    if pressed is None:
        return None
    action, user, channel, container = pressed
    value, user_id = action.get("value"), user.get("id")
    channel_id = channel.get("id") if isinstance(channel, Mapping) else None
    if not (isinstance(value, str) and value and isinstance(user_id, str) and channel_id):
        return None
    box = container if isinstance(container, Mapping) else {}
    thread, ts = box.get("thread_ts"), box.get("message_ts")
    return ApprovalAction(
        approval_id=value[:64],
        approve=action.get("action_id") == approve_action,
        user_id=user_id,
        channel_id=str(channel_id),
        thread_ts=thread if isinstance(thread, str) and thread else None,
        message_ts=ts if isinstance(ts, str) and ts else None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackAction:
    """A press of an answer's feedback buttons (a ``block_actions`` interaction)."""

    value: int
    user_id: str
    channel_id: str
    #: the answer's own ts, as Slack reports the message the buttons are on
    message_ts: str


def feedback_action_of(
    payload: Mapping[str, Any], *, action_id: str, values: Mapping[str, int]
) -> FeedbackAction | None:
    """The feedback press in an interaction payload, else ``None``."""
    pressed = _press(payload, (action_id,))
    if pressed is None:
        return None
    action, user, channel, container = pressed
    value = values.get(str(action.get("value")))
    user_id = _str(user.get("id"))
    channel_id = _str(channel.get("id")) if isinstance(channel, Mapping) else None
    box = container if isinstance(container, Mapping) else {}
    message_ts = _str(box.get("message_ts"))
    if value is None or user_id is None or channel_id is None or message_ts is None:
        return None
    return FeedbackAction(
        value=value, user_id=user_id, channel_id=channel_id, message_ts=message_ts
    )
