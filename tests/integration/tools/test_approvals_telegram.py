"""Approvals on Telegram: the assistant uses its read tools in a forum topic and asks before
a `confirm` tool in that same topic (inline keyboard, callback_query, answerCallbackQuery);
someone else's press is refused with an alert; a double press approves once; the card is
retired (keyboard removed). The request surviving a SIGKILL of the process, on every surface,
is tests/contract/test_approvals.py."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.openai import OpenAIAgent
from gateway.runtime.gateway import Gateway
from gateway.tools.catalog import Tool, ToolCaller, ToolSpec
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings

BOT = "@GatewayTestBot"
POLICY = """
[tools."ops.restart_service"]
domains = ["ops"]
operation = "write"
risk = "medium"
confirm = true
aliases = ["restart"]
"""
RESTART = {"name": "ops__restart_service", "arguments": {"service": "api"}, "id": "r1"}


def approvals_gateway(
    database_url: str, fake: FakeOpenAI, tmp_path: Path, adapter: Any, **settings: Any
) -> Any:
    """An in-process gateway on ``adapter``'s platform alone, with the fake model and a tools
    file holding ``POLICY``."""
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(POLICY)
    return running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=str(tools_file),
        **settings,
    )


def install(gw: Gateway, runs: list[Mapping[str, Any]]) -> None:
    async def restart(args: Mapping[str, Any], caller: ToolCaller) -> str:
        runs.append(args)
        return f"restarted {args.get('service')}"

    assert gw.tools is not None
    spec = ToolSpec(
        name="ops.restart_service",
        description="Restart a service",
        parameters={"type": "object", "properties": {"service": {"type": "string"}}},
        source="test",
    )
    gw.tools.catalog.add(Tool(spec=spec, handler=restart), defaults={})


async def test_telegram_topic_read_tool_then_approval_card_buttons_alert_and_retirement(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    """What is Telegram's own: the card's two inline buttons and their ``callback_data``,
    someone else's press answered with an alert, the asker's presses answered in the
    client, the card retired by an edit that removes the keyboard; and the read tool used in
    the same topic first. The request waiting across a restart, the refused press in another
    topic and the one run are the contract suite's (tests/contract/test_approvals.py)."""
    runs: list[Mapping[str, Any]] = []

    async with FakeTelegram() as tg:
        forum = tg.forum("Ops")
        ann, mallory = tg.user("Ann"), tg.user("Mallory")
        topic = tg.create_topic(forum, "Deploys", by=ann)
        fake.script.extend(
            [
                Step(),  # the first message: answered with an echo
                Step(tool_calls=[{"name": "search_thread", "arguments": {"query": "api"}}]),
                Step(text="You said the api was slow."),
                Step(tool_calls=[RESTART]),
                # after the click the turn asks for the same call again and finds it approved
                Step(tool_calls=[RESTART]),
                Step(text="Restarted the api."),
            ]
        )
        adapter = TelegramAdapter(
            telegram_settings(tg), poll_timeout=1, backoff_initial=0.05, pace=(0.05, 0.1)
        )
        with structlog.testing.capture_logs() as logs:
            async with approvals_gateway(
                database_url,
                fake,
                tmp_path,
                adapter,
                # counts sendMessage calls per answer: previews are tested in tests/streaming
                GATEWAY_STREAMING=False,
                prepare=lambda gw: install(gw, runs),
            ) as gw:
                tg.user_says(forum, f"{BOT} the api is slow today", topic=topic, user=ann)
                await wait_for(lambda: len(tg.sent_to(forum, topic)) == 1)
                tg.user_says(forum, f"{BOT} what did I say earlier?", topic=topic, user=ann)
                await wait_for(lambda: len(tg.sent_to(forum, topic)) == 2)
                tg.user_says(forum, f"{BOT} please restart the api", topic=topic, user=ann)
                card = await wait_for(
                    lambda: [s for s in tg.sent_to(forum, topic) if "reply_markup" in s.params]
                )
                [sent_card] = card
                keyboard = forum.messages[sent_card.message_id]["reply_markup"]["inline_keyboard"]
                approve, deny = (b["callback_data"] for b in keyboard[0])
                assert approve.startswith("apv:") and approve.endswith(":y") and deny.endswith(":n")
                # someone else presses Approve: refused politely, with an alert
                q1 = tg.user_clicks(forum, sent_card.message_id, approve, user=mallory)
                await wait_for(lambda: any(a[0] == q1 for a in tg.callback_answers))
                q2 = tg.user_clicks(forum, sent_card.message_id, approve, user=ann)
                q3 = tg.user_clicks(forum, sent_card.message_id, approve, user=ann)
                await wait_for(
                    lambda: [s.text for s in tg.sent_to(forum, topic)][-1] == "Restarted the api.",
                    timeout=15,
                )
                await wait_for(lambda: tg.edits, timeout=10)
                await wait_for(lambda: {q2, q3} <= {a[0] for a in tg.callback_answers})
                metrics = gw.metrics.render().decode()
    answers = {a[0]: a for a in tg.callback_answers}
    assert answers[q1][2] is True and "only the person who asked" in str(answers[q1][1])
    assert answers[q2][1] == "Approved. Running it now." and answers[q2][2] is False
    assert answers[q3][1] == "Already decided: approved."
    assert runs == [{"service": "api"}]  # after approval, once
    # every bot message landed in the topic; the card was retired (keyboard removed)
    texts = [s.text for s in tg.sent_to(forum, topic)]
    assert texts[:2] == ["re: " + f"{BOT} the api is slow today", "You said the api was slow."]
    assert texts[-1] == "Restarted the api." and len(tg.sent_to(forum, None)) == 0
    [(_chat, mid, text, markup)] = tg.edits
    assert mid == sent_card.message_id and markup is None
    assert text.startswith("✅ Approved by telegram:") and "reply_markup" not in forum.messages[mid]
    assert 'gateway_tool_approvals_total{outcome="approved"} 1.0' in metrics
    events = [e["event"] for e in logs]
    for expected in (
        "tool_routing",
        "approval_requested",
        "approval_click_refused",
        "approval_resumed",
        "approval_decided",
        "approval_card_retired",
    ):
        assert expected in events, expected
