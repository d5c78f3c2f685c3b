"""A ⏹ reaction on the bot's answer, as Slack's Events API delivers it: a request to stop the
answer being written in that thread, not feedback; removing it asks for nothing."""

from __future__ import annotations

from typing import Any

from adapters.slack.extract import reaction_of
from gateway.core.domain import Reaction


def event(kind: str, name: str) -> dict[str, Any]:
    return {
        "type": "event_callback",
        "event_id": "Ev1",
        "event": {
            "type": kind,
            "user": "U0HUMAN",
            "reaction": name,
            "item": {"type": "message", "channel": "C0GENERAL", "ts": "1700000000.000100"},
        },
    }


def test_a_stop_reaction_asks_to_stop() -> None:
    assert reaction_of(event("reaction_added", "black_square_for_stop")) == Reaction(
        chat_id="C0GENERAL", message_id="1700000000.000100", user_id="U0HUMAN", value=0, stop=True
    )


def test_taking_a_stop_reaction_back_asks_for_nothing() -> None:
    assert reaction_of(event("reaction_removed", "black_square_for_stop")) is None


def test_thumbs_stay_feedback() -> None:
    found = reaction_of(event("reaction_added", "+1"))
    assert found is not None and found.value == 1 and not found.stop
