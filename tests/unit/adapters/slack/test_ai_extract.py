"""Pure extraction of Slack's AI surface: ``assistant_thread_started`` (the thread it opened,
as the DM thread's session), a press of an answer's feedback buttons, the asker carried on
the reply target, and malformed shapes read as nothing rather than a crash."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack.actions import feedback_action_of
from adapters.slack.assistant import TITLE_CHARS, title_of
from adapters.slack.blocks import FEEDBACK_ACTION, FEEDBACK_VALUES
from adapters.slack.extract import (
    RECIPIENT,
    BotIdentity,
    assistant_thread_of,
    extract_event,
)
from gateway.core.domain import Envelope, SessionKey

ME = BotIdentity(user_id="U0BOT", bot_id="B0BOT", team_id="T0")


def started(thread: Any) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "team_id": "T0",
        "event_id": "Ev1",
        "event": {"type": "assistant_thread_started", "assistant_thread": thread},
    }


def press(action: Any, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "block_actions",
        "user": {"id": "U0HUMAN"},
        "channel": {"id": "C0GEN"},
        "container": {"type": "message", "message_ts": "2.000002", "thread_ts": "1.000001"},
        "actions": [action],
    }
    body.update(changes)
    return body


def test_an_opened_assistant_thread_is_its_dm_threads_place() -> None:
    opened = assistant_thread_of(
        started({"user_id": "U0HUMAN", "channel_id": "D0DM", "thread_ts": "1.000001"})
    )
    assert opened is not None
    assert opened.key == SessionKey(
        platform="slack", scope="T0", chat_id="D0DM", thread_id="1.000001"
    )
    assert opened.user_id == "U0HUMAN"
    # and the event itself is stored as one we do not answer
    assert not isinstance(extract_event(started({}), me=ME), Envelope)


@pytest.mark.parametrize(
    "thread",
    [
        None,
        [],
        {"channel_id": "D0DM"},
        {"channel_id": "D0DM", "thread_ts": "nope"},
        {"thread_ts": 1},
    ],
)
def test_a_malformed_assistant_thread_is_nothing(thread: Any) -> None:
    assert assistant_thread_of(started(thread)) is None
    assert assistant_thread_of({"type": "event_callback", "event": "x"}) is None


def test_a_feedback_press_reads_the_pressed_side_the_person_and_the_answer() -> None:
    action = {"type": "feedback_buttons", "action_id": FEEDBACK_ACTION, "value": "bad"}
    found = feedback_action_of(press(action), action_id=FEEDBACK_ACTION, values=FEEDBACK_VALUES)
    assert found is not None
    assert (found.value, found.user_id, found.channel_id, found.message_ts) == (
        -1,
        "U0HUMAN",
        "C0GEN",
        "2.000002",
    )


@pytest.mark.parametrize(
    "body",
    [
        press({"action_id": FEEDBACK_ACTION, "value": "great"}),  # not one of our values
        press({"action_id": "gateway_approval_approve", "value": "good"}),  # another button
        press({"action_id": FEEDBACK_ACTION, "value": "good"}, container={}),  # no message
        press({"action_id": FEEDBACK_ACTION, "value": "good"}, user="U0"),
        press({"action_id": FEEDBACK_ACTION, "value": "good"}, type="view_submission"),
        press("not an object"),
    ],
)
def test_anything_else_is_not_a_feedback_press(body: dict[str, Any]) -> None:
    assert feedback_action_of(body, action_id=FEEDBACK_ACTION, values=FEEDBACK_VALUES) is None


def test_a_persons_message_carries_them_as_the_recipient_of_a_streamed_answer() -> None:
    def message(**fields: Any) -> dict[str, Any]:
        event = {"type": "message", "channel": "C0GEN", "ts": "1.000001", "text": "<@U0BOT> hi"}
        event.update(fields)
        return {"type": "event_callback", "team_id": "T0", "event_id": "Ev2", "event": event}

    asked = extract_event(message(user="U0HUMAN"), me=ME)
    assert isinstance(asked, Envelope) and asked.target.extra == {RECIPIENT: "U0HUMAN"}
    by_bot = extract_event(message(user="U0OTHER", bot_id="B0OTHER"), me=ME)
    assert not isinstance(by_bot, Envelope) or RECIPIENT not in by_bot.target.extra


def test_a_thread_title_is_the_first_questions_first_line_cut_short() -> None:
    assert title_of("\n  How do I   reset it?\nmore") == "How do I reset it?"
    long = title_of("word " * 40)
    assert long is not None and len(long) == TITLE_CHARS and long.endswith("…")
    assert title_of("  \n ") is None
