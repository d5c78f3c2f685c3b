"""A place's profile ``answer`` rule is an input of the one answer policy, on every platform:
a message nobody addressed to the bot is answered where the profile says ``all``, and a
profile saying ``mentions`` overrides the platform's older answer-all shorthand there. Each
platform's real extract runs on a real payload with the rules its adapter builds."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.mattermost.extract import BotIdentity as MattermostBot
from adapters.mattermost.extract import ExtractContext
from adapters.mattermost.extract import extract_event as mattermost_extract
from adapters.mattermost.settings import MattermostSettings
from adapters.slack.extract import BotIdentity as SlackBot
from adapters.slack.extract import extract_event as slack_extract
from adapters.slack.settings import SlackSettings
from adapters.telegram.extract import BotIdentity as TelegramBot
from adapters.telegram.extract import extract_update
from adapters.telegram.settings import TelegramSettings
from adapters.web.extract import extract as web_extract
from gateway.core.config_file import parse_config_text
from gateway.core.domain import Envelope, Trigger
from gateway.core.settings import Settings
from gateway.inbound.ingress import admit
from gateway.profiles.model import ProfileBook
from gateway.profiles.parse import KnownTools, parse_profiles
from testsupport.answering import mattermost_rules as mattermost_rules
from testsupport.answering import slack_rules as slack_rules
from testsupport.answering import telegram_rules as telegram_rules
from testsupport.mattermost import load_payload as mattermost_payload
from testsupport.telegram import load_payload as telegram_payload

TELEGRAM_CHAT = "-1001812257489"  # the forum of the real topic payload, its topic 23
MM_SCOPE = "chat.example.com"
MM_CHANNEL = "1waumyyd6jyczrxntuiopybygy"  # the real root-post capture's channel


def book(places: dict[str, str]) -> ProfileBook:
    lines = ['[profiles.everyone]\nanswer = "all"\n[profiles.quiet]\nanswer = "mentions"\n']
    lines += ["[places]"] + [f'"{p}" = "{name}"' for p, name in places.items()]
    config = parse_config_text("\n".join(lines) + "\n")
    return parse_profiles(config, models=["gpt-4o-mini"], tools=KnownTools())


def core(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def telegram(profiles: ProfileBook, **settings: Any) -> Envelope:
    s = core(**settings)
    rules = telegram_rules(s.surface(TelegramSettings), s, place_answers_all=profiles.answers_all)
    update = telegram_payload("telegram_update_forum_topic_message.json", update_id=5)
    result = admit(extract_update(update, bot=TelegramBot(id=1, username="GatewayTestBot")), rules)
    assert isinstance(result, Envelope), result
    return result


def slack(profiles: ProfileBook, **settings: Any) -> Envelope:
    s = core(**settings)
    rules = slack_rules(s.surface(SlackSettings), s, place_answers_all=profiles.answers_all)
    event = {
        "type": "message",
        "channel": "C1",
        "channel_type": "channel",
        "user": "UHUMAN",
        "text": "is the build green?",
        "ts": "1700000000.000100",
    }
    payload = {"type": "event_callback", "team_id": "T1", "event_id": "Ev1", "event": event}
    result = admit(slack_extract(payload, me=SlackBot(user_id="UBOT", team_id="T1")), rules)
    assert isinstance(result, Envelope), result
    return result


def mattermost(profiles: ProfileBook, **settings: Any) -> Envelope:
    s = core(**settings)
    rules = mattermost_rules(
        s.surface(MattermostSettings), s, place_answers_all=profiles.answers_all
    )
    bot = MattermostBot(user_id="b0tb0tb0tb0tb0tb0tb0tb0tb0", username="gatewaybot")
    ctx = ExtractContext(scope=MM_SCOPE, bot=bot)
    result = admit(
        mattermost_extract(
            mattermost_payload("mattermost_ws_posted_root_post.capture.json"), ctx=ctx
        ),
        rules,
    )
    assert isinstance(result, Envelope), result
    return result


PLATFORMS = [
    (telegram, f"telegram:*:{TELEGRAM_CHAT}:23", {"TELEGRAM_ANSWER_ALL_CHATS": TELEGRAM_CHAT}),
    (slack, "slack:*:C1", {"SLACK_ANSWER_ALL_CHANNELS": "C1"}),
    (mattermost, f"mattermost:*:{MM_CHANNEL}", {"MATTERMOST_ANSWER_ALL_CHANNELS": MM_CHANNEL}),
]


@pytest.mark.parametrize(("extract", "place", "shorthand"), PLATFORMS)
def test_a_profile_answering_all_needs_no_mention(extract: Any, place: str, shorthand: Any) -> None:
    assert extract(book({})).trigger is not Trigger.ALWAYS  # not addressed: not answered
    assert extract(book({place: "everyone"})).trigger is Trigger.ALWAYS
    # another place's profile changes nothing here
    assert extract(book({"web:*:elsewhere": "everyone"})).trigger is not Trigger.ALWAYS


@pytest.mark.parametrize(("extract", "place", "shorthand"), PLATFORMS)
def test_the_answer_all_settings_are_shorthands_a_profile_may_override(
    extract: Any, place: str, shorthand: dict[str, str]
) -> None:
    # the platform's own setting and the core's one answer every message where no profile says
    assert extract(book({}), **shorthand).trigger is Trigger.ALWAYS
    assert extract(book({}), GATEWAY_ANSWER_ALL_PLACES=place).trigger is Trigger.ALWAYS
    # a place whose profile says "mentions" is answered on mentions only
    assert extract(book({place: "quiet"}), **shorthand).trigger is not Trigger.ALWAYS
    assert extract(book({"*": "quiet"}), **shorthand).trigger is not Trigger.ALWAYS


def test_the_web_chat_answers_every_message_whatever_the_profile() -> None:
    # every web chat message is addressed to the assistant: a profile cannot silence it
    result = web_extract("general", {"text": "hi", "client_msg_id": "m1"}, sender="ann")
    assert isinstance(result, Envelope) and result.trigger is Trigger.ALWAYS
