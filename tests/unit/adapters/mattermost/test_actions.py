"""The signed context of Mattermost approval buttons (``adapters.mattermost.actions``), pure."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.mattermost.actions import (
    ActionPress,
    Refused,
    actions_key,
    card_attachments,
    press_of,
)
from adapters.mattermost.settings import MattermostSettings
from gateway.core.errors import ConfigError

KEY = actions_key("bot-token")
CHANNEL = "c" * 26


def _request(action: str = "approve", **changes: Any) -> dict[str, Any]:
    [attachment] = card_attachments(
        url="https://gw.example/mattermost/actions", key=KEY, approval_id="ap1", channel_id=CHANNEL
    )
    [button] = [a for a in attachment["actions"] if a["id"] == action]
    body = {
        "user_id": "u" * 26,
        "channel_id": CHANNEL,
        "post_id": "p" * 26,
        "context": dict(button["integration"]["context"]),
    }
    body.update(changes)
    return body


def test_a_press_of_our_button_is_verified() -> None:
    assert press_of(_request(), key=KEY) == ActionPress(
        approval_id="ap1", approve=True, user_id="u" * 26, channel_id=CHANNEL, post_id="p" * 26
    )
    deny = press_of(_request("deny"), key=KEY)
    assert isinstance(deny, ActionPress) and not deny.approve


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ([1], "not a JSON object"),
        ({"user_id": "u"}, "no context"),
        (_request(context={"approval_id": "ap1", "action": "approve"}), "context incomplete"),
        (_request(context=_request()["context"] | {"action": "maybe"}), "context incomplete"),
        (_request(context=_request()["context"] | {"sig": None}), "context unsigned"),
        (_request(context=_request("deny")["context"] | {"action": "approve"}), "bad signature"),
        (_request(context=_request()["context"] | {"approval_id": "ap2"}), "bad signature"),
        (_request(context=_request()["context"] | {"sig": "é" * 64}), "bad signature"),
        (_request(user_id=""), "no user or channel"),
        (_request(channel_id="d" * 26), "pressed in another channel"),
    ],
)
def test_forged_or_moved_requests_are_refused(body: object, reason: str) -> None:
    assert press_of(body, key=KEY) == Refused(reason)


def test_another_token_means_another_key() -> None:
    assert press_of(_request(), key=actions_key("new-token")) == Refused("bad signature")


def _settings(**values: Any) -> MattermostSettings:
    return MattermostSettings(_env_file=None, **values)  # type: ignore[call-arg]


def test_the_actions_url_setting_is_validated() -> None:
    base: dict[str, Any] = {"MATTERMOST_URL": "https://mm.example", "MATTERMOST_TOKEN": "t"}
    with pytest.raises(ValueError, match="MATTERMOST_ACTIONS_URL"):
        _settings(**base, MATTERMOST_ACTIONS_URL="gw.example/actions")
    with pytest.raises(ConfigError, match="MATTERMOST_URL"):
        _settings(MATTERMOST_ACTIONS_URL="https://gw.example/x")
