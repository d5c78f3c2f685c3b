"""The parts of streaming below the platforms: the shared pacing budget (one SQL function for
every replica), the OpenAI agent's streamed answer (deltas in order, usage and tokens kept),
and the status line while a tool runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.settings import TelegramSettings
from adapters.web.settings import WebSettings
from gateway.agents.base import ContextMessage, ToolCall, Turn
from gateway.agents.openai import OpenAIAgent, tool_status
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import ConfigError
from gateway.core.ports import PaceRule
from gateway.core.registry import check_settings
from gateway.core.settings import load_settings
from session_store.repos.previews import PreviewStore
from session_store.store import Store
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings


async def test_two_replicas_share_one_pacing_budget(database_url: str) -> None:
    one = await Store.connect(database_url, min_size=1, max_size=2)
    two = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        a, b = PreviewStore(one.db), PreviewStore(two.db)
        rules = [PaceRule("telegram:chat:42", 10.0), PaceRule("telegram:group:42", 30.0)]
        assert await a.reserve(rules) == 0.0
        # the other replica's next call on this chat waits for the chat's 10 s...
        second = await b.reserve([PaceRule("telegram:chat:42", 10.0)], max_wait=5.0)
        assert 5.0 < second <= 10.0
        # ... and one under the group's key for its 30 s
        assert 25.0 < await b.reserve([PaceRule("telegram:group:42", 3.0)], max_wait=5.0) <= 30.0
        # over max_wait nothing was reserved: asking again sees the same slot, not a later one
        again = await b.reserve([PaceRule("telegram:chat:42", 10.0)], max_wait=5.0)
        assert again <= second
        # another chat is not held back
        assert await b.reserve([PaceRule("telegram:chat:43", 10.0)]) == 0.0
        # many reservations at once on one key are spaced, none lost
        one_key = [PaceRule("slack:channel:C1", 1.0)]
        waits = await asyncio.gather(*(a.reserve(one_key) for _ in range(5)))
        assert sorted(round(w) for w in waits) == [0, 1, 2, 3, 4]
    finally:
        await one.close()
        await two.close()


class Recording:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def text(self, delta: str) -> None:
        self.events.append(("text", delta))

    def restart(self) -> None:
        self.events.append(("restart", ""))

    def status(self, line: str) -> None:
        self.events.append(("status", line))


def turn(sink: Recording | None, **kw: Any) -> Turn:
    key = SessionKey(platform="web", scope="local", chat_id="c", thread_id="t")
    target = ReplyTarget(platform="web", scope="local", chat_id="c", thread_id="t")
    ask = ContextMessage(seq_no=1, role="user", content="hello there")
    return Turn(
        session_id=1, key=key, target=target, context=[ask], new_messages=[ask], stream=sink, **kw
    )


async def test_openai_agent_streams_deltas_and_keeps_usage(fake: FakeOpenAI) -> None:
    agent = OpenAIAgent(base_url=fake.base_url, api_key="k", model="small")
    fake.script.append(Step(text="one two three four five", chunk_chars=4, chunk_delay=0.0))
    sink = Recording()
    [reply] = await agent.respond(turn(sink))
    await agent.aclose()
    assert reply.text == "one two three four five"
    assert "".join(d for kind, d in sink.events if kind == "text") == reply.text
    assert len(sink.events) >= 5  # in pieces, as they came
    body = fake.requests[-1].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    usage = reply.metadata["usage"]
    assert usage["prompt_tokens"] == fake.requests[-1].true_prompt_tokens
    assert reply.tokens_used == usage["total_tokens"] > 0


async def test_no_stream_asked_answers_in_one_piece(fake: FakeOpenAI) -> None:
    agent = OpenAIAgent(base_url=fake.base_url, api_key="k", model="small")
    [reply] = await agent.respond(turn(None))
    await agent.aclose()
    assert reply.text == "re: hello there" and "stream" not in fake.requests[-1].body


def test_tool_status_lines() -> None:
    calls = [ToolCall(id="1", name="search_knowledge", arguments="{}")]
    assert tool_status(calls) == "searching the knowledge base…"
    assert tool_status([ToolCall(id="2", name="ops__x", arguments="{}")]) == "using ops__x…"


async def test_the_preview_shows_a_status_line_while_a_tool_runs(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        topic = tg.create_topic(forum, "Questions")
        fake.script.extend(
            [
                Step(tool_calls=[{"name": "search_thread", "arguments": {"query": "api"}}]),
                # the answer starts a little later, so the status is there to see
                Step(text="You asked about the api.", delay=1.0),
            ]
        )
        adapter = TelegramAdapter(
            telegram_settings(tg), poll_timeout=1, backoff_initial=0.05, pace=(0.05, 0.1)
        )
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
            web_chat=False,
            AGENT_MODEL="small",
            GATEWAY_STREAM_EDIT_SECONDS=0.2,
        ):
            tg.user_says(forum, "@GatewayTestBot what about the api?", topic=topic)
            await wait_for(
                lambda: (
                    [m.get("text") for m in tg.messages_in(forum, topic)][-1:]
                    == ["You asked about the api."]
                ),
                timeout=20,
            )
        [preview] = tg.sent_to(forum, topic)
        assert preview.text == "searching this thread…"
        assert [e["type"] for e in preview.entities] == ["italic"]
        # the status became the answer in place: one message in the topic
        bot = [m for m in tg.messages_in(forum, topic) if m["from"]["id"] == tg.bot.id]
        assert [m["message_id"] for m in bot] == [preview.message_id]


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"GATEWAY_STREAMING": "sometimes"}, "GATEWAY_STREAMING"),
        ({"TELEGRAM_STREAMING": "maybe"}, "TELEGRAM_STREAMING"),
        ({"GATEWAY_STREAM_EDIT_SECONDS": "0"}, "GATEWAY_STREAM_EDIT_SECONDS"),
        ({"GATEWAY_STREAM_EDIT_SECONDS": "soon"}, "GATEWAY_STREAM_EDIT_SECONDS"),
    ],
)
def test_bad_streaming_settings_name_the_setting(values: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        # each surface's own settings are read as the CLI reads them at start
        check_settings(load_settings(_env_file=None, **values))
    assert info.value.setting == setting


def test_streaming_settings_per_platform() -> None:
    settings = load_settings(_env_file=None, GATEWAY_STREAMING="false", WEB_STREAMING="true")
    assert settings.gateway_streaming is False
    assert settings.surface(WebSettings).web_streaming is True
    assert settings.surface(TelegramSettings).telegram_streaming is None
