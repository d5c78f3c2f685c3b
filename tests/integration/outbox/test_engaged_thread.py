"""A follow-up is ignored: on Slack and Mattermost a person mentions the bot, the answer
streams into the thread, and the person replies in the thread WITHOUT a mention the moment the
first preview text shows. The thread is engaged once the bot was addressed there, so that
follow-up is answered, every time (20 threads per platform in one running gateway)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from adapters.mattermost.adapter import MattermostAdapter
from adapters.slack import SlackAdapter
from gateway.agents.openai import OpenAIAgent
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.slack import HUMAN, FakeSlack
from testsupport.harness import running_gateway, wait_for
from testsupport.mattermost import connected, make_config
from testsupport.slack import slack_settings

REPETITIONS = 20
#: the question is long so that its answer (``re: <question>``, 174 characters streamed 10
#: every 0.1 s by the fake model: 1.7 s) is still being written when the follow-up arrives
#: (its first preview shows within about 0.3 s)
QUESTION = "question {n}: " + "please tell me a great deal about this " * 4


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    """The outbox's streaming model, 10 characters a chunk instead of 6."""
    server = await FakeOpenAI(chunk_delay=0.1, chunk_chars=10).start()
    try:
        yield server
    finally:
        await server.stop()


def gateway(database_url: str, fake: FakeOpenAI, adapter: Any) -> Any:
    return running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS=False,
        GATEWAY_STREAM_EDIT_SECONDS=0.2,
        GATEWAY_TURN_WORKERS=REPETITIONS,
    )


async def answered_threads(thread: Callable[[int], Awaitable[bool]]) -> list[int]:
    """Run ``thread(n)`` for every repetition at once; the repetitions whose follow-up was
    answered."""
    results = await asyncio.gather(*(thread(n) for n in range(REPETITIONS)))
    return [n for n, answered in enumerate(results) if answered]


async def test_a_follow_up_sent_while_the_answer_streams_is_answered_on_slack(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeSlack() as slack:
        for n in range(REPETITIONS):
            slack.add_channel(f"C0T{n:02d}", members=(HUMAN,))
        adapter = SlackAdapter(slack_settings(slack))
        async with gateway(database_url, fake, adapter) as gw:
            slack.events_url = f"{gw.url}slack/events"

            async def thread(n: int) -> bool:
                channel = f"C0T{n:02d}"
                mention = f"<@{slack.bot_user_id}> " + QUESTION.format(n=n)
                root = await slack.user_posts(channel, mention)

                def in_thread() -> list[Any]:
                    return [m for m in slack.bot_posts(channel) if m.thread_ts == root.ts]

                preview = await wait_for(in_thread, timeout=30, message="a preview")
                assert "follow-up" not in preview[0].text
                await slack.user_posts(channel, f"and a follow-up {n}", thread_ts=root.ts)
                try:
                    await wait_for(
                        lambda: any(f"follow-up {n}" in m.text for m in in_thread()), timeout=30
                    )
                except AssertionError:  # timed out: the follow-up was not answered
                    return False
                return True

            answered = await answered_threads(thread)
    assert len(answered) == REPETITIONS, f"{len(answered)} of {REPETITIONS} answered"


async def test_a_follow_up_sent_while_the_answer_streams_is_answered_on_mattermost(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeMattermost() as mm:
        members = {mm.bot.id, mm.alice.id}
        channels = [mm.add_channel(f"room-{n}", "O", members=members) for n in range(REPETITIONS)]
        adapter = MattermostAdapter(make_config(mm))
        async with gateway(database_url, fake, adapter):
            await connected(adapter)

            async def thread(n: int) -> bool:
                channel = channels[n]
                root = await mm.user_posts(channel, QUESTION.format(n=n), mention_bot=True)

                def in_thread() -> list[dict[str, Any]]:
                    return mm.posts_in(channel, root_id=root["id"], by=mm.bot)

                preview = await wait_for(in_thread, timeout=30, message="a preview")
                assert "follow-up" not in preview[0]["message"]
                await mm.user_posts(channel, f"and a follow-up {n}", root_id=root["id"])
                try:
                    await wait_for(
                        lambda: any(f"follow-up {n}" in p["message"] for p in in_thread()),
                        timeout=30,
                    )
                except AssertionError:  # timed out: the follow-up was not answered
                    return False
                return True

            answered = await answered_threads(thread)
    assert len(answered) == REPETITIONS, f"{len(answered)} of {REPETITIONS} answered"
