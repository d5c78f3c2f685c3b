"""A streamed answer that breaks off or stalls mid-way is restarted in the same preview on
Telegram: the thread ends with exactly one message, the whole answer, never a duplicate."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.openai import OpenAIAgent
from gateway.agents.retry import RetryPolicy
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import Chat, FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings

BOT = "@GatewayTestBot"
ANSWER = "The whole answer: " + " ".join(f"part{n}" for n in range(30)) + "."


def bot_messages(tg: FakeTelegram, chat: Chat, topic: int | None) -> list[dict[str, Any]]:
    return [m for m in tg.messages_in(chat, topic) if (m.get("from") or {}).get("id") == tg.bot.id]


@pytest.mark.parametrize(
    "fault",
    [Step(text=ANSWER, break_after=60), Step(text=ANSWER, stall=30)],
    ids=["broken", "stalled"],
)
async def test_a_stream_that_breaks_off_is_restarted_without_a_duplicate_message(
    database_url: str, fake: FakeOpenAI, fault: Step
) -> None:
    # the answer asked again streams 30 characters a chunk (0.7 s, not the fixture's 3.6 s)
    fake.script.extend([fault, Step(text=ANSWER, chunk_chars=30)])
    agent = OpenAIAgent(
        base_url=fake.base_url,
        api_key="k",
        model="small",
        timeout=1.5,
        policy=RetryPolicy(deadline=20, base=0.2),
    )
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        adapter = TelegramAdapter(
            telegram_settings(tg), poll_timeout=1, backoff_initial=0.05, pace=(0.05, 0.1)
        )
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=agent,
            web_chat=False,
            AGENT_MODEL="small",
            GATEWAY_TOOLS=False,
            GATEWAY_STREAM_EDIT_SECONDS=0.2,
        ):
            tg.user_says(forum, f"{BOT} tell me", topic=topic, user=ann)
            # the broken answer was visible before it broke
            await wait_for(lambda: bot_messages(tg, forum, topic), timeout=15)
            await wait_for(
                lambda: [m["text"] for m in bot_messages(tg, forum, topic)] == [ANSWER],
                timeout=30,
            )
        assert len(fake.turn_requests) == 2, "the broken stream was asked again once"
        assert len(tg.sent_to(forum, topic)) == 1, "one message for the whole answer"
        assert [m["text"] for m in bot_messages(tg, forum, topic)] == [ANSWER]
