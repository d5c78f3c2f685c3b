"""Interactive buttons on Mattermost approval cards, pure: no I/O.

An approval card posted while ``MATTERMOST_ACTIONS_URL`` is set carries a message attachment
with two buttons. Each button's ``integration`` names the gateway's ``POST /mattermost/actions``
and a ``context`` the gateway signed: the approval id, the button (approve or deny), the
channel, and an HMAC-SHA256 over those three. When someone presses a button, the Mattermost
server POSTs to that URL a JSON ``PostActionIntegrationRequest``: ``user_id`` (who pressed,
as the server knows them), ``channel_id`` and ``post_id`` (where the card is), and our
``context`` back (``server/channels/app/integration_action.go``, ``DoPostActionWithCookie``).

Mattermost does not sign these requests, and anyone who can reach the URL can POST to it:
the signature over the context is what makes a request ours. Mattermost keeps the
``integration`` part of a post on the server (it strips it before posts reach clients), so
the context is not visible to channel members. The core then checks the place (channel and
card post), the card and the person (``Intake.approval_click``), as for every platform.

The key is derived from the bot token, so every replica and every restart verifies the
buttons of cards posted before, with nothing more to configure; a new token retires the
buttons of open cards (the ✅/❌ reactions keep working).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ACTIONS_PATH = "/mattermost/actions"
#: button ids (Mattermost wants plain alphanumeric ids)
APPROVE = "approve"
DENY = "deny"
#: approval ids are opaque and short (``gateway.tools.approvals``); anything longer is not ours
_MAX_ID = 64
_KEY_LABEL = b"gateway mattermost approval actions v1"


def actions_key(token: str) -> bytes:
    """The HMAC key for button contexts, derived from the bot token (see the module doc)."""
    return hmac.new(token.encode("utf-8"), _KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, approval_id: str, action: str, channel_id: str) -> str:
    message = "\n".join((approval_id, action, channel_id)).encode("utf-8")
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def card_attachments(
    *, url: str, key: bytes, approval_id: str, channel_id: str
) -> list[dict[str, Any]]:
    """The ``props.attachments`` of an approval card: Approve and Deny buttons."""

    def button(action: str, name: str, style: str) -> dict[str, Any]:
        return {
            "id": action,
            "name": name,
            "style": style,
            "integration": {
                "url": url,
                "context": {
                    "approval_id": approval_id,
                    "action": action,
                    "channel_id": channel_id,
                    "sig": _mac(key, approval_id, action, channel_id),
                },
            },
        }

    return [
        {
            "fallback": "Approve or deny this request",
            "actions": [button(APPROVE, "Approve", "success"), button(DENY, "Deny", "danger")],
        }
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionPress:
    """A verified button press: the request is one the gateway's own card asked for."""

    approval_id: str
    approve: bool
    #: who pressed, as the Mattermost server reports it
    user_id: str
    channel_id: str
    post_id: str | None


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a request to the actions URL is not a press of one of our buttons."""

    reason: str


def _text(value: object, limit: int = 200) -> str | None:
    return value if isinstance(value, str) and value and len(value) <= limit else None


def press_of(payload: object, *, key: bytes) -> ActionPress | Refused:
    """Verify one request to ``POST /mattermost/actions``: the context's signature in
    constant time, then that it was pressed in the channel the context was signed for."""
    if not isinstance(payload, Mapping):
        return Refused("not a JSON object")
    context = payload.get("context")
    if not isinstance(context, Mapping):
        return Refused("no context")
    approval_id = _text(context.get("approval_id"), _MAX_ID)
    action = context.get("action")
    signed_channel = _text(context.get("channel_id"))
    sig = context.get("sig")
    if approval_id is None or action not in (APPROVE, DENY) or signed_channel is None:
        return Refused("context incomplete")
    if not isinstance(sig, str):
        return Refused("context unsigned")
    expected = _mac(key, approval_id, str(action), signed_channel)
    # bytes, not str: compare_digest raises TypeError on a non-ASCII str
    if not hmac.compare_digest(expected.encode("ascii"), sig.encode("utf-8")):
        return Refused("bad signature")
    user_id = _text(payload.get("user_id"))
    channel_id = _text(payload.get("channel_id"))
    if user_id is None or channel_id is None:
        return Refused("no user or channel")
    if channel_id != signed_channel:
        return Refused("pressed in another channel")
    return ActionPress(
        approval_id=approval_id,
        approve=action == APPROVE,
        user_id=user_id,
        channel_id=channel_id,
        post_id=_text(payload.get("post_id")),
    )
