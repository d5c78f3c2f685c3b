"""The Slack app manifests in ``deploy/slack/`` ask for exactly what the code uses: the bot
scopes of the Web API methods the adapter calls and of the events extraction handles, and the
event subscriptions that deliver those events. ``adapters/slack/scopes.py`` is the
table in between; each side is checked against it."""

from __future__ import annotations

import ast
from typing import Any

import pytest
import yaml
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.scopes import (
    APP_TOKEN_METHODS,
    BOT_SCOPES,
    EVENT_SUBSCRIPTIONS,
    WEB_API_SCOPES,
)
from testsupport.fakes.slack import DEFAULT_SCOPES, DEFAULT_SUBSCRIPTIONS
from testsupport.paths import REPO

ROOT = REPO
SLACK_CODE = ROOT / "adapters" / "slack"
MANIFESTS = {
    "events": ROOT / "deploy" / "slack" / "manifest.events.yaml",
    "socket": ROOT / "deploy" / "slack" / "manifest.socket.yaml",
}


def manifest(mode: str) -> dict[str, Any]:
    data = yaml.safe_load(MANIFESTS[mode].read_text())
    assert isinstance(data, dict)
    return data


def web_api_calls() -> set[str]:
    """Every Slack Web API method the adapter's code calls: ``<client>.<method>(...)`` where
    ``<method>`` is one of slack_sdk's WebClient methods, as Slack names it."""
    generic = {"api_call", "session"}
    called: set[str] = set()
    for path in SLACK_CODE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                # ``super().__init__(...)`` and other dunders are not Web API methods
                if name.startswith("_") or name in generic:
                    continue
                if callable(getattr(AsyncWebClient, name, None)):
                    called.add(name.replace("_", "."))
    return called


def handled_event_types() -> set[str]:
    """Event types ``extract`` branches on: strings compared with ``event_type`` or with
    ``event.get("type")``."""
    found: set[str] = set()
    tree = ast.parse((SLACK_CODE / "extract.py").read_text())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        is_type = (isinstance(left, ast.Name) and left.id == "event_type") or (
            isinstance(left, ast.Call)
            and isinstance(left.func, ast.Attribute)
            and left.func.attr == "get"
            and isinstance(left.func.value, ast.Name)
            and left.func.value.id == "event"
            and [a.value for a in left.args if isinstance(a, ast.Constant)] == ["type"]
        )
        if not is_type:
            continue
        for comparator in node.comparators:
            for const in ast.walk(comparator):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    found.add(const.value)
    return found


@pytest.mark.parametrize("mode", sorted(MANIFESTS))
def test_manifest_scopes_and_events_are_exactly_what_the_code_uses(mode: str) -> None:
    data = manifest(mode)
    scopes = data["oauth_config"]["scopes"]["bot"]
    events = data["settings"]["event_subscriptions"]["bot_events"]
    assert sorted(scopes) == list(BOT_SCOPES)
    assert len(scopes) == len(set(scopes))
    assert sorted(events) == sorted(EVENT_SUBSCRIPTIONS)
    # people can DM the bot (message.im is subscribed, so the Messages tab must be writable)
    home = data["features"]["app_home"]
    assert home["messages_tab_enabled"] is True
    assert home["messages_tab_read_only_enabled"] is False


def test_events_manifest_points_at_the_gateway_route_and_socket_manifest_needs_no_url() -> None:
    events = manifest("events")["settings"]
    assert events["socket_mode_enabled"] is False
    assert events["event_subscriptions"]["request_url"].endswith("/slack/events")
    socket = manifest("socket")["settings"]
    assert socket["socket_mode_enabled"] is True
    assert "request_url" not in socket["event_subscriptions"]


def test_every_web_api_call_in_the_code_has_its_scopes_listed() -> None:
    called = web_api_calls()
    assert {"auth.test", "chat.postMessage", "conversations.replies"} <= called
    unlisted = called - set(WEB_API_SCOPES) - set(APP_TOKEN_METHODS)
    assert not unlisted, (
        f"add these methods and their scopes to adapters/slack/scopes.py: {unlisted}"
    )
    stale = set(WEB_API_SCOPES) - called
    assert not stale, f"scopes.py lists methods the code no longer calls: {stale}"


def test_every_handled_event_type_is_subscribed_and_every_subscription_is_handled() -> None:
    handled = handled_event_types()
    delivered = {event_type for event_type, _ in EVENT_SUBSCRIPTIONS.values()}
    assert {"app_mention", "message", "reaction_added", "reaction_removed"} <= handled
    assert handled >= delivered, f"subscribed but never handled: {delivered - handled}"
    # a handled type nobody subscribes to would never arrive
    assert not (handled - delivered), f"handled but not subscribed: {handled - delivered}"


def test_the_fake_slack_grants_and_delivers_what_the_manifest_asks_for() -> None:
    assert sorted(DEFAULT_SCOPES) == list(BOT_SCOPES)
    assert DEFAULT_SUBSCRIPTIONS <= set(EVENT_SUBSCRIPTIONS)
