"""Adaptive Cards: an approval request with its Approve / Deny buttons (``Action.Execute``,
which Teams delivers as an ``adaptiveCard/action`` invoke carrying only the verb and the
request's opaque id), and the same card once decided, without buttons."""

from __future__ import annotations

from typing import Any

from microsoft_agents.activity import Attachment

from adapters.teams.extract import APPROVE_VERB, DENY_VERB

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
#: Teams renders schema 1.5 on every client; Action.Execute needs 1.4
CARD_VERSION = "1.5"


def approval_card(text: str, approval_id: str) -> Attachment:
    return _card(
        text,
        actions=[
            {
                "type": "Action.Execute",
                "title": "Approve",
                "verb": APPROVE_VERB,
                "style": "positive",
                "data": {"approval_id": approval_id},
            },
            {
                "type": "Action.Execute",
                "title": "Deny",
                "verb": DENY_VERB,
                "style": "destructive",
                "data": {"approval_id": approval_id},
            },
        ],
    )


def decided_card(text: str) -> Attachment:
    return _card(text, actions=[])


def _card(text: str, *, actions: list[dict[str, Any]]) -> Attachment:
    content: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": CARD_VERSION,
        "body": [{"type": "TextBlock", "text": text, "wrap": True}],
    }
    if actions:
        content["actions"] = actions
    return Attachment(content_type=CARD_CONTENT_TYPE, content=content)


def card_actions(attachments: list[Any] | None) -> list[dict[str, Any]]:
    """The buttons of the adaptive cards among ``attachments`` (as the connector got them)."""
    found: list[dict[str, Any]] = []
    for attachment in attachments or []:
        if isinstance(attachment, dict) and attachment.get("contentType") == CARD_CONTENT_TYPE:
            content = attachment.get("content") or {}
            found.extend(a for a in content.get("actions") or [] if isinstance(a, dict))
    return found
