"""The place a message was posted in, normalized by each platform's extract (``Place``),
stored with the message by the core, and read back by the context code without any
platform field. The system prompt stays what it was for the same conversation, including
for messages stored before the place was (read through the legacy fields, in one place)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest

from adapters.mattermost.extract import BotIdentity as MattermostBot
from adapters.mattermost.extract import ExtractContext
from adapters.mattermost.extract import extract_event as mattermost_extract
from adapters.slack.extract import BotIdentity as SlackBot
from adapters.slack.extract import extract_event as slack_extract
from adapters.telegram.extract import BotIdentity as TelegramBot
from adapters.telegram.extract import extract_update
from gateway.core.domain import PLACE_KEY, Envelope, Place
from gateway.inbound.ingress import admit
from gateway.inbound.intake import to_inbound
from gateway.inbound.policy import AnswerRules
from gateway.turns.context import describe_place, stored_place
from session_store.records import InboundMessage
from testsupport.mattermost import load_payload as mattermost_payload
from testsupport.slack import load_payload as slack_payload
from testsupport.telegram import load_payload as telegram_payload


def _telegram(update: dict[str, Any]) -> Envelope:
    bot = TelegramBot(id=5550001, username="GatewayTestBot")
    extracted = admit(extract_update(update, bot=bot), AnswerRules())
    assert isinstance(extracted, Envelope)
    return extracted


def _slack(payload: dict[str, Any]) -> Envelope:
    me = SlackBot(user_id="UBOT", bot_id="BBOT", team_id="T1")
    extracted = admit(slack_extract(payload, me=me), AnswerRules())
    assert isinstance(extracted, Envelope)
    return extracted


def _mattermost(frame: dict[str, Any]) -> Envelope:
    ctx = ExtractContext(scope="mm", bot=MattermostBot(user_id="botid", username="gatewaybot"))
    extracted = mattermost_extract(frame, ctx=ctx)
    assert isinstance(extracted, Envelope)
    return extracted


def telegram_private() -> Envelope:
    user = {"id": 208432445, "is_bot": False, "first_name": "Arbi"}
    chat = {"id": 208432445, "type": "private", "first_name": "Arbi"}
    message = {"message_id": 7, "from": user, "chat": chat, "date": 1693533691, "text": "hi"}
    return _telegram({"update_id": 902, "message": message})


def slack_dm() -> Envelope:
    payload = copy.deepcopy(slack_payload("slack_event_thread_reply.bolt_test.json"))
    payload["event"].update(channel="D0DM", channel_type="im")
    return _slack(payload)


def mattermost_dm() -> Envelope:
    frame = copy.deepcopy(mattermost_payload("mattermost_ws_posted_root_post.capture.json"))
    frame["data"]["channel_type"] = "D"
    return _mattermost(frame)


CASES: dict[str, tuple[Envelope, Place]] = {
    "telegram forum topic": (
        _telegram(telegram_payload("telegram_update_forum_topic_message.json")),
        Place(chat_name="Tim Developer PDN \N{REPLACEMENT CHARACTER}"),
    ),
    "telegram private chat": (telegram_private(), Place(direct=True)),
    "slack channel thread": (
        _slack(slack_payload("slack_event_thread_reply.bolt_test.json")),
        Place(),
    ),
    "slack dm": (slack_dm(), Place(direct=True)),
    "mattermost channel": (
        _mattermost(mattermost_payload("mattermost_ws_posted_root_post.capture.json")),
        Place(chat_name="test2"),
    ),
    "mattermost dm": (mattermost_dm(), Place(direct=True, chat_name="test2")),
}


def _stored_metadata(envelope: Envelope) -> Mapping[str, Any]:
    inbound = to_inbound(envelope)
    assert isinstance(inbound, InboundMessage)
    # what the store keeps is JSON: round-trip it like the jsonb column does
    stored: Mapping[str, Any] = json.loads(json.dumps(inbound.metadata))
    return stored


@pytest.mark.parametrize("case", list(CASES))
def test_each_extract_fills_the_place(case: str) -> None:
    envelope, expected = CASES[case]
    assert envelope.place == expected


@pytest.mark.parametrize("case", list(CASES))
def test_the_core_stores_the_place_and_reads_it_back(case: str) -> None:
    envelope, _ = CASES[case]
    metadata = _stored_metadata(envelope)
    assert metadata[PLACE_KEY] == envelope.place.as_json()
    assert stored_place(metadata) == envelope.place


@pytest.mark.parametrize("case", list(CASES))
def test_the_prompt_is_the_same_as_for_a_message_stored_before_the_place(case: str) -> None:
    envelope, _ = CASES[case]
    metadata = _stored_metadata(envelope)
    legacy = {k: v for k, v in metadata.items() if k != PLACE_KEY}
    for title in (None, "deploy plan"):
        now = describe_place(
            envelope.key, envelope.target, place=stored_place(metadata), title=title
        )
        before = describe_place(
            envelope.key, envelope.target, place=stored_place(legacy), title=title
        )
        assert now == before


def test_the_place_is_read_only_from_its_key_when_present() -> None:
    # platform fields beside it are ignored: the stored place says "not direct, no name"
    metadata = {PLACE_KEY: {"direct": False}, "chat_type": "private", "chat_title": "Ops"}
    assert stored_place(metadata) == Place()


def test_the_place_round_trips_and_tolerates_junk() -> None:
    place = Place(direct=False, chat_name="Ops", thread_name="Deploys")
    assert Place.from_json(json.loads(json.dumps(place.as_json()))) == place
    assert Place.from_json({"direct": "yes", "chat_name": 3, "thread_name": ""}) == Place()


def test_a_thread_name_is_said_instead_of_the_first_words() -> None:
    envelope, _ = CASES["telegram forum topic"]
    text = describe_place(
        envelope.key,
        envelope.target,
        place=Place(chat_name="Ops", thread_name="Deploys"),
        title="deploy plan",
    )
    assert '("Deploys")' in text and "deploy plan" not in text
