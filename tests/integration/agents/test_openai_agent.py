"""AGENT=openai end to end: a real gateway, the real OpenAI client code, a fake
OpenAI-compatible server and the sink surface, all over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.agents.loading import load_agent
from gateway.agents.openai import OpenAIAgent
from gateway.agents.retry import RetryPolicy
from gateway.runtime.gateway import Gateway
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import make_settings, running_gateway, wait_for


def agent_for(fake: FakeOpenAI, **kw: Any) -> OpenAIAgent:
    return OpenAIAgent(base_url=fake.base_url, api_key="sk-test", model="small", **kw)


async def rows(gw: Gateway, session_id: int) -> list[dict[str, Any]]:
    async with gw.store.db.connection() as conn:
        found = await conn.fetch(
            "SELECT seq_no, role, content, model, tokens_used, metadata FROM messages "
            "WHERE session_id = $1 ORDER BY seq_no",
            session_id,
        )
    return [dict(r) for r in found]


async def test_reply_records_the_model_that_produced_it_and_the_tokens_used(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    fake.model_suffix = "-2024-11-20"  # the server names the exact snapshot it ran
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=agent_for(fake),
        web_chat=False,
        AGENT_MODEL="small",
        AGENT_MAX_OUTPUT_TOKENS=300,
    ) as gw:
        out = await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "hello"})
        await wait_for(lambda: len(sink.accepted) == 1)
        stored = await rows(gw, out.session_id)
    assert sink.texts_in("c", "T") == ["re: hello"]
    [request] = fake.requests
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.body["model"] == "small" and request.body["max_tokens"] == 300
    assert "Where this conversation is: sink, chat c, thread T" in request.system
    assert request.body["messages"][-1] == {"role": "user", "content": "hello", "name": "tester"}
    reply = stored[-1]
    assert reply["role"] == "assistant" and reply["model"] == "small-2024-11-20"
    usage = reply["metadata"]["usage"]
    assert reply["tokens_used"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] == request.true_prompt_tokens


@pytest.mark.parametrize(
    ("step", "reason", "says"),
    [
        (Step(status=500), "HTTP 500", "the model is unavailable"),  # retried, then given up
        (Step(status=401), "HTTP 401", "could not answer that just now"),  # not retried
        (Step(status=429, retry_after=0.1), "HTTP 429", "the model is rate limited"),
        (Step(delay=2.0), "did not answer in time", "the model took too long"),
        (Step(drop=True), "connection failed", "the model is unavailable"),
        (Step(text=""), "no text", "could not answer that just now"),
    ],
    ids=["5xx", "4xx", "429", "timeout", "dropped", "empty"],
)
async def test_agent_failure_is_an_apology_in_the_same_thread_and_the_next_message_works(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, step: Step, reason: str, says: str
) -> None:
    fake.model_faults["small"] = step  # every request fails until the deadline
    adapter = SinkAdapter(sink.url)
    # a short timeout only where the timeout is the failure: on a busy machine a dropped
    # connection could otherwise be reported as a timeout first
    agent = agent_for(
        fake,
        timeout=0.5 if reason == "did not answer in time" else 5.0,
        policy=RetryPolicy(deadline=1.5, base=0.2),
    )
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent, web_chat=False, AGENT_MODEL="small"
    ) as gw:
        out = await adapter.submit({"chat": "c", "thread": "T9", "id": "1", "text": "first"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=10)
        del fake.model_faults["small"]
        await adapter.submit({"chat": "c", "thread": "T9", "id": "2", "text": "second"})
        await wait_for(lambda: len(sink.accepted) == 2, timeout=10)
        stored = await rows(gw, out.session_id)
    apology, answer = sink.accepted
    assert apology["target"]["thread_id"] == "T9" and answer["target"]["thread_id"] == "T9"
    assert apology["text"].startswith("Sorry, ") and says in apology["text"]
    # the upstream error text stays out of the thread; it is in the metadata
    assert reason not in apology["text"]
    assert answer["text"] == "re: second"
    failed = next(r for r in stored if r["role"] == "assistant")
    meta = failed["metadata"]
    assert meta["failed_turn"] is True and reason in meta["error"]
    assert meta["agent_model"] == "small"
    # the failed turn is not context for the next one: the model never sees the apology
    last = fake.turn_requests[-1]
    assert all("Sorry" not in c for c in last.contents("assistant"))
    assert last.contents("user") == ["first", "second"]


async def test_a_burst_during_a_slow_run_is_answered_by_one_run_that_sees_it_in_order(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    fake.script.append(Step(delay=1.5))
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False
    ):
        await adapter.submit({"chat": "c", "thread": "B", "id": "0", "text": "slow one"})
        await wait_for(lambda: len(fake.requests) == 1)
        for i in range(1, 6):
            await adapter.submit({"chat": "c", "thread": "B", "id": str(i), "text": f"m{i}"})
        await wait_for(lambda: len(sink.accepted) == 2, timeout=10)
        await wait_for(lambda: all(r.finished for r in fake.requests))
    assert len(fake.turn_requests) == 2  # one run for the whole burst, not five
    second = fake.turn_requests[1].body["messages"]
    # the transcript reads as it happened: the reply follows what it answered, then the burst
    assert [(m["role"], m["content"]) for m in second[1:]] == [
        ("user", "slow one"),
        ("assistant", "re: slow one"),
        *[("user", f"m{i}") for i in range(1, 6)],
    ]
    assert sink.texts_in("c", "B") == ["re: slow one", "re: m5"]


async def test_interrupt_mode_restarts_the_run_with_everything(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    fake.script.append(Step(delay=5.0))
    adapter = SinkAdapter(sink.url)
    started = time.monotonic()
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=agent_for(fake),
        web_chat=False,
        AGENT_BUSY_MODE="interrupt",
    ):
        await adapter.submit({"chat": "c", "thread": "I", "id": "1", "text": "draft question"})
        await wait_for(lambda: len(fake.requests) == 1)
        await adapter.submit({"chat": "c", "thread": "I", "id": "2", "text": "actually this"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=10)
    assert time.monotonic() - started < 4.5  # did not wait for the cancelled call
    assert len(fake.turn_requests) == 2
    assert fake.turn_requests[1].contents("user") == ["draft question", "actually this"]
    assert sink.texts_in("c", "I") == ["re: actually this"]  # one answer, to everything


async def test_model_choice_sticks_per_session_then_per_person_and_falls_back_silently(
    database_url: str, fake: FakeOpenAI, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    models: dict[str, Any] = {"AGENT_MODEL": "small", "AGENT_MODELS": "small,big,huge"}

    def model_of_last_request() -> str:
        return str(fake.turn_requests[-1].body["model"])

    async def say(thread: str, text: str, user: str, n: int) -> None:
        count = len(sink.accepted)
        await adapter.submit(
            {"chat": "c", "thread": thread, "id": f"{thread}{n}", "text": text, "user": user}
        )
        await wait_for(lambda: len(sink.accepted) == count + 1, timeout=30)

    async with running_gateway(
        database_url, adapters=[adapter], agent=agent_for(fake), web_chat=False, **models
    ):
        await say("A", "/model", "ann", 1)
        listing = sink.accepted[-1]["text"]
        assert "small (default, in use here)" in listing and "big" in listing and "huge" in listing
        await say("A", "/model nonsense", "ann", 2)
        assert "Unknown model 'nonsense'" in sink.accepted[-1]["text"]
        await say("A", "/model BIG", "ann", 3)
        assert "now uses big" in sink.accepted[-1]["text"]
        assert sink.accepted[-1]["target"]["thread_id"] == "A"
        assert fake.requests == []  # commands never reach the model
        await say("A", "q1", "ann", 4)
        assert model_of_last_request() == "big"  # the session's choice
        await say("B", "q2", "ann", 5)
        assert model_of_last_request() == "big"  # ann's last choice, in a new thread
        await say("C", "q3", "bob", 6)
        assert model_of_last_request() == "small"  # bob chose nothing: the default
        await say("C", "/model huge", "bob", 7)
        await say("C", "q4", "bob", 8)
        assert model_of_last_request() == "huge"
        await say("A", "/model", "ann", 9)
        assert "big (in use here)" in sink.accepted[-1]["text"]

    # big leaves the allow-list: ann's threads fall back silently to the default
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=agent_for(fake),
        web_chat=False,
        AGENT_MODEL="small",
        AGENT_MODELS="small,huge",
    ):
        await say("A", "q5", "ann", 10)
        assert model_of_last_request() == "small"
        assert sink.accepted[-1]["text"] == "re: q5"
        await say("D", "q6", "bob", 11)
        assert model_of_last_request() == "huge"  # bob's choice is still allowed


def test_agent_settings_load_the_openai_and_http_agents(database_url: str) -> None:
    settings = make_settings(
        database_url, AGENT="openai", OPENAI_BASE_URL="http://127.0.0.1:9/v1", AGENT_MODEL="m"
    )
    agent = load_agent(settings.agent, settings)
    assert isinstance(agent, OpenAIAgent) and agent.model == "m"
    http_settings = make_settings(
        database_url,
        AGENT="http",
        AGENT_HTTP_URL="http://127.0.0.1:9/turn",
        AGENT_HTTP_SECRET="s3cret",
    )
    assert load_agent(http_settings.agent, http_settings).name == "http"
