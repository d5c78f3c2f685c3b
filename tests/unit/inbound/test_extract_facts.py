"""Each platform's extract reports facts only, the same facts on every platform, read from the
real payloads in testsupport/payloads (and small variants of them); the answer policy decides."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from adapters.mattermost.extract import BotIdentity as MattermostBot
from adapters.mattermost.extract import ExtractContext
from adapters.mattermost.extract import extract_event as mattermost_extract
from adapters.slack.extract import BotIdentity as SlackBot
from adapters.slack.extract import extract_event as slack_extract
from adapters.telegram.extract import BotIdentity as TelegramBot
from adapters.telegram.extract import extract_update
from adapters.web.extract import extract as web_extract
from gateway.core.domain import Envelope, Extracted, Facts, SessionKey, Trigger
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from testsupport.paths import PAYLOADS

RULES = AnswerRules()


def load(name: str) -> dict[str, Any]:
    data = json.loads((PAYLOADS / name).read_text())
    assert isinstance(data, dict)
    return data


def facts_of(result: Extracted) -> Facts:
    assert isinstance(result, Envelope), result
    assert result.facts is not None
    return result.facts


# --- Slack ---------------------------------------------------------------------------------

SLACK_ME = SlackBot(user_id="U0LAN0Z89", bot_id="B0ME")


def slack(name: str, **event: Any) -> Extracted:
    payload = copy.deepcopy(load(name))
    payload["event"].update(event)
    return admit(slack_extract(payload, me=SLACK_ME), RULES)


SLACK_MENTION = "slack_event_app_mention.docs.json"
SLACK_REPLY = "slack_event_thread_reply.bolt_test.json"
SLACK_CASES: list[tuple[str, Callable[[], Extracted], dict[str, Any], Trigger]] = [
    ("app_mention", lambda: slack(SLACK_MENTION), {"mentioned": True}, Trigger.ALWAYS),
    (
        "thread reply",
        lambda: slack(SLACK_REPLY),
        {"thread_reply": True},
        Trigger.IF_FOLLOWING,
    ),
    (
        "thread broadcast",
        lambda: slack("slack_event_thread_broadcast.bolt_test.json"),
        {"thread_reply": True},
        Trigger.IF_FOLLOWING,
    ),
    (
        "mention in a thread reply",
        lambda: slack(SLACK_REPLY, text="<@U0LAN0Z89> and?"),
        {"thread_reply": True, "mentioned": True},
        Trigger.ALWAYS,
    ),
    (
        "direct message",
        lambda: slack(SLACK_REPLY, channel="D1", channel_type="im", thread_ts=None),
        {"direct": True},
        Trigger.ALWAYS,
    ),
    (
        "another bot's mention",
        lambda: slack(SLACK_MENTION, bot_id="B0OTHER"),
        {"mentioned": True, "from_bot": True},
        Trigger.NEVER,
    ),
    (
        "top-level chatter",
        lambda: slack(SLACK_REPLY, thread_ts=None),
        {},
        Trigger.NEVER,
    ),
]


@pytest.mark.parametrize(
    ("case", "extract", "expected", "trigger"), SLACK_CASES, ids=[c[0] for c in SLACK_CASES]
)
def test_slack_facts(
    case: str, extract: Callable[[], Extracted], expected: dict[str, Any], trigger: Trigger
) -> None:
    result = extract()
    got = facts_of(result)
    assert isinstance(result, Envelope)
    assert got == Facts(place=result.key, person=result.sender.id, **expected)
    assert result.trigger is trigger


def test_slack_reports_the_person_and_the_place() -> None:
    got = facts_of(slack(SLACK_REPLY))
    assert got.person == "W222"
    assert got.place == SessionKey(
        platform="slack", scope="T111", chat_id="C111", thread_id="1726133698.626339"
    )


# --- Mattermost ----------------------------------------------------------------------------

MM_BOT = MattermostBot(user_id="botuserid00000000000000000", username="gatewaybot")
MM_CTX = ExtractContext(scope="mm.example.com", bot=MM_BOT)
MM_ROOT = "mattermost_ws_posted_root_post.capture.json"
MM_REPLY = "mattermost_ws_posted_thread_reply.FILLED.json"


def mattermost(name: str, data: dict[str, Any] | None = None, **post: Any) -> Extracted:
    frame = copy.deepcopy(load(name))
    decoded = json.loads(frame["data"]["post"])
    decoded.update(post)
    frame["data"]["post"] = json.dumps(decoded)
    frame["data"].update(data or {})
    return admit(mattermost_extract(frame, ctx=MM_CTX), RULES)


MENTIONS = {"mentions": json.dumps([MM_BOT.user_id])}
MM_CASES: list[tuple[str, Callable[[], Extracted], dict[str, Any], Trigger]] = [
    ("root post", lambda: mattermost(MM_ROOT), {}, Trigger.NEVER),
    ("thread reply", lambda: mattermost(MM_REPLY), {"thread_reply": True}, Trigger.IF_FOLLOWING),
    ("mentioned", lambda: mattermost(MM_ROOT, MENTIONS), {"mentioned": True}, Trigger.ALWAYS),
    (
        "mentioned by name",
        lambda: mattermost(MM_REPLY, message="@gatewaybot and?"),
        {"mentioned": True, "thread_reply": True},
        Trigger.ALWAYS,
    ),
    (
        "direct message",
        lambda: mattermost(MM_ROOT, {"channel_type": "D"}),
        {"direct": True},
        Trigger.ALWAYS,
    ),
    ("group message", lambda: mattermost(MM_ROOT, {"channel_type": "G"}), {}, Trigger.NEVER),
    (
        "another bot",
        lambda: mattermost(MM_ROOT, MENTIONS, props={"from_bot": "true"}),
        {"mentioned": True, "from_bot": True},
        Trigger.NEVER,
    ),
]


@pytest.mark.parametrize(
    ("case", "extract", "expected", "trigger"), MM_CASES, ids=[c[0] for c in MM_CASES]
)
def test_mattermost_facts(
    case: str, extract: Callable[[], Extracted], expected: dict[str, Any], trigger: Trigger
) -> None:
    result = extract()
    got = facts_of(result)
    assert isinstance(result, Envelope)
    assert got == Facts(place=result.key, person="cmr7sncacib4xfhd6yo3n4tf5e", **expected)
    assert result.trigger is trigger


def test_mattermost_reports_the_thread_as_the_place() -> None:
    got = facts_of(mattermost(MM_REPLY))
    assert got.place == SessionKey(
        platform="mattermost",
        scope="mm.example.com",
        chat_id="1waumyyd6jyczrxntuiopybygy",
        thread_id="ap8doms33tn1pj3ihjk3gmf4jy",
    )


# --- Telegram ------------------------------------------------------------------------------

TG_BOT = TelegramBot(id=7490005555, username="debug_log_bot")
FORUM = -1001812257489


def telegram(name: str, **message: Any) -> Extracted:
    update = copy.deepcopy(load(name))
    update["update_id"] = 1  # the captures leave it out
    update["message"].update(message)
    return admit(extract_update(update, bot=TG_BOT), RULES)


TOPIC = "telegram_update_forum_topic_message.json"
TG_CASES: list[tuple[str, Callable[[], Extracted], dict[str, Any], Trigger]] = [
    ("topic message", lambda: telegram(TOPIC), {}, Trigger.NEVER),
    (
        "general topic",
        lambda: telegram("telegram_update_general_topic_message.DERIVED.json"),
        {},
        Trigger.NEVER,
    ),
    (
        "reply to a person in a topic",
        lambda: telegram("telegram_update_forum_topic_reply_to_user_message.json"),
        {},
        Trigger.NEVER,
    ),
    (
        # a reply to the bot without text or file: reported, yet nothing to answer
        "reply to the bot without content",
        lambda: telegram("telegram_update_nonforum_supergroup_reply.PARTIAL.json"),
        {"reply_to_bot": True, "content": False},
        Trigger.NEVER,
    ),
    (
        "reply to the bot",
        lambda: telegram("telegram_update_nonforum_supergroup_reply.PARTIAL.json", text="and?"),
        {"reply_to_bot": True},
        Trigger.ALWAYS,
    ),
    (
        "mention",
        lambda: telegram(
            TOPIC,
            text="@debug_log_bot hi",
            entities=[{"type": "mention", "offset": 0, "length": 14}],
        ),
        {"mentioned": True},
        Trigger.ALWAYS,
    ),
    (
        "command to the bot",
        lambda: telegram(
            TOPIC, text="/new", entities=[{"type": "bot_command", "offset": 0, "length": 4}]
        ),
        {"command": True},
        Trigger.ALWAYS,
    ),
    (
        "command to another bot",
        lambda: telegram(
            TOPIC,
            text="/new@OtherBot",
            entities=[{"type": "bot_command", "offset": 0, "length": 13}],
        ),
        {},
        Trigger.NEVER,
    ),
    (
        "private chat",
        lambda: telegram(TOPIC, chat={"id": 208432445, "type": "private"}, is_topic_message=None),
        {"direct": True},
        Trigger.ALWAYS,
    ),
    (
        "automatic forward",
        lambda: telegram(TOPIC, is_automatic_forward=True),
        {"automatic": True},
        Trigger.NEVER,
    ),
]


@pytest.mark.parametrize(
    ("case", "extract", "expected", "trigger"), TG_CASES, ids=[c[0] for c in TG_CASES]
)
def test_telegram_facts(
    case: str, extract: Callable[[], Extracted], expected: dict[str, Any], trigger: Trigger
) -> None:
    result = extract()
    got = facts_of(result)
    assert isinstance(result, Envelope)
    assert got == Facts(place=result.key, person=result.sender.id, **expected)
    assert result.trigger is trigger


def test_telegram_reports_the_topic_as_the_place() -> None:
    got = facts_of(telegram(TOPIC))
    assert got.person == "208432445"
    assert got.place.chat_id == str(FORUM) and got.place.thread_id is not None


# --- web -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("channel", "direct"), [("general", False), ("~ann", True)])
def test_web_posts_are_written_to_the_assistant(channel: str, direct: bool) -> None:
    result = web_extract(channel, {"text": "hi", "client_msg_id": "c1"}, sender="ann")
    got = facts_of(result)
    assert got == Facts(place=got.place, person="ann", direct=direct, mentioned=True)
    assert isinstance(result, Envelope) and result.trigger is Trigger.ALWAYS
