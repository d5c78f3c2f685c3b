"""Allow-lists on every platform, one rule (docs/configuration in README): when a
chat/channel list is set, a message from any other place is ignored; when a user list is set,
a message from anyone else is ignored; both lists apply together. The reason names the
setting. The same table runs against the three extractors."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from adapters.mattermost.extract import BotIdentity as MattermostBot
from adapters.mattermost.extract import ExtractContext, extract_post
from adapters.mattermost.settings import MattermostSettings
from adapters.slack.extract import BotIdentity as SlackBot
from adapters.slack.extract import extract_event
from adapters.slack.settings import SlackSettings
from adapters.telegram.extract import BotIdentity as TelegramBot
from adapters.telegram.extract import extract_update
from adapters.telegram.settings import TelegramSettings
from gateway.core.domain import Envelope, Extracted, Ignored
from gateway.core.settings import Settings
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from testsupport.answering import mattermost_rules as mattermost_answer_rules
from testsupport.answering import slack_rules as slack_answer_rules
from testsupport.answering import telegram_rules as telegram_answer_rules
from testsupport.paths import PAYLOADS

#: (chat list, user list, expected: None = accepted, else the setting named in the reason)
TABLE: list[tuple[str, str, str | None]] = [
    ("", "", None),
    ("CHAT", "", None),
    ("OTHER", "", "CHATS"),
    ("", "USER", None),
    ("", "OTHER", "USERS"),
    ("CHAT,OTHER", "OTHER,USER", None),
    ("CHAT", "OTHER", "USERS"),
    ("OTHER", "USER", "CHATS"),
]

Extractor = Callable[[list[str], list[str]], Extracted]


def settings(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


# each platform's rules from the core settings and its own, read from the same values
def telegram_rules(s: Settings) -> AnswerRules:
    return telegram_answer_rules(s.surface(TelegramSettings), s)


def slack_rules(s: Settings) -> AnswerRules:
    return slack_answer_rules(s.surface(SlackSettings), s)


def mattermost_rules(s: Settings) -> AnswerRules:
    return mattermost_answer_rules(s.surface(MattermostSettings), s)


def _telegram(chats: list[str], users: list[str]) -> Extracted:
    update = json.loads((PAYLOADS / "telegram_update_forum_topic_message.json").read_text())
    update["update_id"] = 1
    chat, user = str(update["message"]["chat"]["id"]), str(update["message"]["from"]["id"])
    return admit(
        extract_update(
            update,
            bot=TelegramBot(id=1, username="GatewayTestBot"),
        ),
        telegram_rules(
            settings(
                TELEGRAM_ALLOWED_CHATS=[chat if c == "CHAT" else c for c in chats],
                TELEGRAM_ALLOWED_USERS=[user if u == "USER" else u for u in users],
            )
        ),
    )


def _slack(chats: list[str], users: list[str]) -> Extracted:
    payload = json.loads((PAYLOADS / "slack_event_app_mention.docs.json").read_text())
    chat, user = payload["event"]["channel"], payload["event"]["user"]
    return admit(
        extract_event(
            payload,
            me=SlackBot(user_id="U0LAN0Z89"),
        ),
        slack_rules(
            settings(
                SLACK_ALLOWED_CHANNELS=[chat if c == "CHAT" else c for c in chats],
                SLACK_ALLOWED_USERS=[user if u == "USER" else u for u in users],
            )
        ),
    )


def _mattermost(chats: list[str], users: list[str]) -> Extracted:
    post = {"id": "p1", "channel_id": "ch1", "user_id": "alice1", "message": "@bot hi"}
    ctx = ExtractContext(scope="mm.example.com", bot=MattermostBot(user_id="bot1", username="bot"))
    rules = mattermost_rules(
        settings(
            MATTERMOST_ALLOWED_CHANNELS=["ch1" if c == "CHAT" else c for c in chats],
            MATTERMOST_ALLOWED_USERS=["alice1" if u == "USER" else u for u in users],
        )
    )
    return admit(extract_post(post, ctx=ctx, channel_type="O", mentions=["bot1"]), rules)


PLATFORMS: dict[str, tuple[Extractor, str, str]] = {
    # extractor, the chat-list setting, the user-list setting
    "telegram": (_telegram, "TELEGRAM_ALLOWED_CHATS", "TELEGRAM_ALLOWED_USERS"),
    "slack": (_slack, "SLACK_ALLOWED_CHANNELS", "SLACK_ALLOWED_USERS"),
    "mattermost": (_mattermost, "MATTERMOST_ALLOWED_CHANNELS", "MATTERMOST_ALLOWED_USERS"),
}


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
@pytest.mark.parametrize(("chats", "users", "refused_by"), TABLE)
def test_allow_lists_have_one_meaning_on_every_platform(
    platform: str, chats: str, users: str, refused_by: str | None
) -> None:
    extract, chat_setting, user_setting = PLATFORMS[platform]
    result = extract([c for c in chats.split(",") if c], [u for u in users.split(",") if u])
    if refused_by is None:
        assert isinstance(result, Envelope), result
    else:
        assert isinstance(result, Ignored), result
        setting = chat_setting if refused_by == "CHATS" else user_setting
        assert result.reason.endswith(f"is not in {setting}"), result.reason
        assert result.event_id is not None  # recorded in the inbox with its reason


def test_slack_edit_outside_the_channel_list_is_ignored() -> None:
    payload = json.loads((PAYLOADS / "slack_event_app_mention.docs.json").read_text())
    edit = copy.deepcopy(payload)
    edit["event"] = {
        "type": "message",
        "subtype": "message_changed",
        "channel": "C123ABC456",
        "hidden": True,
        "ts": "1515449600.000001",
        "message": {"user": "U061F7AUR", "text": "new", "ts": "1515449522.000016"},
        "previous_message": {"user": "U061F7AUR", "text": "old", "ts": "1515449522.000016"},
    }
    result = admit(
        extract_event(edit, me=SlackBot(user_id="U0BOT")),
        slack_rules(settings(SLACK_ALLOWED_CHANNELS="C9")),
    )
    assert isinstance(result, Ignored)
    assert result.reason == "channel C123ABC456 is not in SLACK_ALLOWED_CHANNELS"


def test_allow_list_settings_are_comma_separated() -> None:
    values: dict[str, Any] = {
        "SLACK_ALLOWED_CHANNELS": "C1, C2",
        "SLACK_ALLOWED_USERS": "U1",
        "MATTERMOST_ALLOWED_CHANNELS": "abc,def",
        "MATTERMOST_ALLOWED_USERS": " u1 ,u2",
    }
    settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    slack = settings.surface(SlackSettings)
    mattermost = settings.surface(MattermostSettings)
    assert slack.slack_allowed_channels == ["C1", "C2"]
    assert slack.slack_allowed_users == ["U1"]
    assert mattermost.mattermost_allowed_channels == ["abc", "def"]
    assert mattermost.mattermost_allowed_users == ["u1", "u2"]


async def test_slack_gateway_answers_only_inside_its_allow_lists(database_url: str) -> None:
    # the settings reach the adapter: a real gateway against the fake Slack
    from adapters.slack import SlackAdapter
    from testsupport.fakes.slack import BOT_TOKEN, SIGNING_SECRET, FakeSlack
    from testsupport.harness import running_gateway, wait_for

    fake = FakeSlack()
    await fake.start()
    try:
        fake.add_channel("C0OPEN")
        fake.add_channel("C0CLOSED")
        values: dict[str, Any] = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_BASE_URL": fake.api_url,
            "SLACK_ALLOWED_CHANNELS": "C0OPEN",
            "SLACK_ALLOWED_USERS": "U0HUMAN",
        }
        adapter = SlackAdapter(SlackSettings(_env_file=None, **values))  # type: ignore[call-arg]
        # the adapter's settings, and the gateway's, whose door applies the lists
        async with running_gateway(
            database_url, adapters=[adapter], web_chat=False, **values
        ) as gw:
            fake.events_url = f"{gw.url}slack/events"
            await fake.user_posts("C0CLOSED", "<@U0BOT> hello")
            await fake.user_posts("C0OPEN", "<@U0BOT> from a stranger", user="U0STRANGER")
            await fake.user_posts("C0OPEN", "<@U0BOT> hello")
            await wait_for(lambda: fake.bot_posts(), message="the allowed reply")
            ignored = await gw.operator.ops.inbound_events(status="ignored", platform="slack")
            reasons = {e.reason for e in ignored}
            assert "channel C0CLOSED is not in SLACK_ALLOWED_CHANNELS" in reasons
            assert "user U0STRANGER is not in SLACK_ALLOWED_USERS" in reasons
        assert [p.text for p in fake.bot_posts()] == ["echo: hello"]
        assert fake.bot_posts("C0CLOSED") == []
    finally:
        await fake.stop()


# --- mention rules: the same table on every platform ------------------------------------------


def _telegram_plain(answer_all: bool) -> Extracted:
    update = json.loads((PAYLOADS / "telegram_update_forum_topic_message.json").read_text())
    update["update_id"] = 1
    chat = str(update["message"]["chat"]["id"])
    return admit(
        extract_update(
            update,
            bot=TelegramBot(id=1, username="GatewayTestBot"),
        ),
        telegram_rules(settings(TELEGRAM_ANSWER_ALL_CHATS=[chat] if answer_all else [])),
    )


def _slack_plain(answer_all: bool) -> Extracted:
    payload = json.loads((PAYLOADS / "slack_event_app_mention.docs.json").read_text())
    payload["event"].update(type="message", channel_type="channel", text="no mention here")
    return admit(
        extract_event(
            payload,
            me=SlackBot(user_id="U0LAN0Z89"),
        ),
        slack_rules(settings(SLACK_ANSWER_ALL_CHANNELS="C123ABC456" if answer_all else "")),
    )


def _mattermost_plain(answer_all: bool) -> Extracted:
    post = {"id": "p1", "channel_id": "ch1", "user_id": "alice1", "message": "no mention here"}
    ctx = ExtractContext(scope="mm.example.com", bot=MattermostBot(user_id="bot1", username="bot"))
    rules = mattermost_rules(settings(MATTERMOST_ANSWER_ALL_CHANNELS="ch1" if answer_all else ""))
    return admit(extract_post(post, ctx=ctx, channel_type="O"), rules)


@pytest.mark.parametrize("extract", [_telegram_plain, _slack_plain, _mattermost_plain])
@pytest.mark.parametrize("answer_all", [False, True])
def test_a_plain_group_message_is_answered_only_in_answer_all_channels(
    extract: Callable[[bool], Extracted], answer_all: bool
) -> None:
    from gateway.core.domain import Trigger

    result = extract(answer_all)
    assert isinstance(result, Envelope), result
    assert result.trigger is (Trigger.ALWAYS if answer_all else Trigger.NEVER)
