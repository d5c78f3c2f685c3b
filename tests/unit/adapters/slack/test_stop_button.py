"""Slack's own stop button (docs.slack.dev/ai/agent-sessions): while a turn runs, the thread's
agent session is ``processing`` (``agents.sessions.setStatus``, through slack_sdk's client
against the fake), which shows the button; afterwards it is ``active`` again. A press arrives
as ``agent_session_stopped`` and is that person's ``/stop`` in that thread."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.slack.extract import BotIdentity, extract_event
from adapters.slack.transport import SlackTransport, make_web_client
from gateway.core.domain import Envelope, Rejected, ReplyTarget
from gateway.turns.typing import hold_typing
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, TEAM_ID, FakeSlack
from testsupport.harness import wait_for

ME = BotIdentity(user_id="U0BOT", bot_id="B0BOT", team_id=TEAM_ID)


def pressed(channel: str, thread_ts: str | None, streams: Any = ()) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "agent_session_stopped",
        "channel": channel,
        "user": HUMAN,
        "streaming_message_ts": list(streams),
        "event_ts": "1700000009.000200",
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return {"type": "event_callback", "team_id": TEAM_ID, "event_id": "EvStop1", "event": event}


def test_a_press_is_the_persons_stop_in_that_thread() -> None:
    found = extract_event(pressed("C0GENERAL", "1700000000.000100", ["1700000001.000100"]), me=ME)
    assert isinstance(found, Envelope)
    assert found.command == "stop" and found.text == "/stop"
    assert found.key.chat_id == "C0GENERAL" and found.key.thread_id == "1700000000.000100"
    assert found.target.thread_id == "1700000000.000100"
    assert found.sender.id == HUMAN and found.facts is not None
    assert found.facts.person == HUMAN and found.facts.mentioned and found.facts.command
    assert found.event_id == "EvStop1"
    # the press has no message of its own; a retried delivery names it the same
    assert found.message_id == "stop@1700000009.000200"
    assert found.metadata["streaming_message_ts"] == ["1700000001.000100"]


def test_a_press_in_a_dm_thread_is_that_threads() -> None:
    found = extract_event(pressed("D0DM", "1700000000.000100"), me=ME)
    assert isinstance(found, Envelope)
    assert found.key.thread_id == "1700000000.000100" and found.place.direct


def test_a_press_without_its_thread_is_refused() -> None:
    assert isinstance(extract_event(pressed("C0GENERAL", None), me=ME), Rejected)


def transport_for(fake: FakeSlack) -> SlackTransport:
    return SlackTransport(make_web_client(token=BOT_TOKEN, base_url=fake.api_url, timeout=5))


def target(channel: str, thread: str | None) -> ReplyTarget:
    return ReplyTarget(platform="slack", scope=TEAM_ID, chat_id=channel, thread_id=thread)


async def test_a_turn_that_ends_while_processing_is_on_its_way_still_ends_it(
    fake: FakeSlack,
) -> None:
    """Slack took ``processing`` but its answer is late, and the turn ends meanwhile (the
    typing task cancelled in that await): the stop button must still go."""
    transport = transport_for(fake)
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "q")], root_text="root")
    fake.answer_late("agents.sessions.setStatus", 1.0)
    holder = asyncio.create_task(hold_typing(transport, target("C0GENERAL", root)))
    await wait_for(lambda: fake.agent_sessions.get(("C0GENERAL", root)) == "processing", timeout=5)
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    assert fake.agent_sessions[("C0GENERAL", root)] == "active"
    assert [s for _, _, s in fake.session_statuses] == ["processing", "active"]


async def test_the_session_is_processing_while_a_turn_runs_then_active(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "q")], root_text="root")
    holder = asyncio.create_task(hold_typing(transport, target("C0GENERAL", root)))
    await wait_for(lambda: fake.agent_sessions.get(("C0GENERAL", root)) == "processing", timeout=5)
    holder.cancel()
    await asyncio.gather(holder, return_exceptions=True)
    assert fake.agent_sessions[("C0GENERAL", root)] == "active"  # the button is gone
    assert [s for _, _, s in fake.session_statuses] == ["processing", "active"]
    # no warning: the fake's app takes agent_session_stopped, as the manifests subscribe
    assert all(
        "warning" not in (c.response or {}) for c in fake.calls_to("agents.sessions.setStatus")
    )


@pytest.mark.parametrize("error", ["missing_scope", "feature_not_enabled"])
async def test_sessions_refused_are_not_tried_again(fake: FakeSlack, error: str) -> None:
    fake.refuse_agent_sessions = error
    transport = transport_for(fake)
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "q")], root_text="root")
    t = target("C0GENERAL", root)
    await transport.typing(t)
    await transport.typing(t)
    await transport.clear_typing(t)
    assert len(fake.calls_to("agents.sessions.setStatus")) == 1
    assert fake.agent_sessions == {}
    assert len(fake.statuses) == 3  # the "is thinking…" status is not affected


async def test_no_session_outside_a_thread(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    await transport.typing(target("D0DM", None))
    await transport.clear_typing(target("D0DM", None))
    assert fake.calls_to("agents.sessions.setStatus") == []


async def test_the_fake_shows_the_button_only_while_processing(fake: FakeSlack) -> None:
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "q")], root_text="root")
    with pytest.raises(AssertionError, match="no stop button"):
        await fake.user_presses_stop("C0GENERAL", root)
    fake.subscriptions.discard("agent_session_stopped")
    transport = transport_for(fake)
    await transport.typing(target("C0GENERAL", root))
    # not subscribed: Slack warns, and shows a loading indicator without the button
    [call] = fake.calls_to("agents.sessions.setStatus")
    assert call.response is not None
    assert call.response["warning"] == "missing_agent_session_stopped_event_subscription"
    with pytest.raises(AssertionError, match="no stop button"):
        await fake.user_presses_stop("C0GENERAL", root)
