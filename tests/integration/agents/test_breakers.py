"""Per-model circuit breakers shared through PostgreSQL: two replicas (two stores on one
database), one sees what the other opened; one probe closes it for both."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.agents.base import ContextMessage, Turn
from gateway.agents.breakers import BreakerSettings, SharedBreakers
from gateway.agents.openai import OpenAIAgent
from gateway.agents.retry import ProviderFailure, RetryPolicy
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.metrics import Metrics
from session_store.repos.breakers import Breakers
from session_store.store import Store
from testsupport.fakes.openai import FakeOpenAI

SETTINGS = BreakerSettings(failures=2, open_seconds=60, refresh=0.0)
#: for the probe: open only briefly
BRIEF = BreakerSettings(failures=2, open_seconds=2.0, refresh=0.0)


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[tuple[SharedBreakers, SharedBreakers]]:
    one = await Store.connect(database_url, min_size=1, max_size=2)
    two = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        yield (
            SharedBreakers(Breakers(one.db), Metrics(), SETTINGS),
            SharedBreakers(Breakers(two.db), Metrics(), SETTINGS),
        )
    finally:
        await one.close()
        await two.close()


def turn(model: str) -> Turn:
    message = ContextMessage(seq_no=1, role="user", content="hello")
    return Turn(
        session_id=1,
        key=SessionKey(platform="sink", scope="test", chat_id="c", thread_id="t"),
        target=ReplyTarget(platform="sink", scope="test", chat_id="c", thread_id="t"),
        context=[message],
        new_messages=[message],
        model=model,
    )


def down(cause: str = "unavailable") -> ProviderFailure:
    return ProviderFailure("the model server answered HTTP 503", cause=cause)  # type: ignore[arg-type]


async def test_a_breaker_opened_by_one_replica_sends_the_other_straight_to_the_fallback(
    replicas: tuple[SharedBreakers, SharedBreakers], fake: FakeOpenAI
) -> None:
    first, second = replicas
    await first.failed("small", down())
    assert await second.available("small"), "one failure does not open it"
    await first.failed("small", down())
    assert not await second.available("small")
    agent = OpenAIAgent(
        base_url=fake.base_url,
        api_key="k",
        model="small",
        fallbacks=["big"],
        policy=RetryPolicy(deadline=5),
        health=second,
    )
    try:
        [reply] = await agent.respond(turn("small"))
    finally:
        await agent.aclose()
    assert reply.model == "big" and reply.metadata["fallback_from"] == "small"
    assert [r.body["model"] for r in fake.requests] == ["big"], "the open model was not asked"
    listed = await second.repo.breakers()
    assert [(b.model, b.is_open, b.last_cause) for b in listed] == [("small", True, "unavailable")]
    rendered = first._metrics.render().decode()
    assert 'gateway_model_breaker_open{model="small"} 1.0' in rendered


async def test_one_probe_after_the_open_time_closes_the_breaker_for_every_replica(
    replicas: tuple[SharedBreakers, SharedBreakers],
) -> None:
    first, second = (SharedBreakers(r.repo, Metrics(), BRIEF) for r in replicas)
    await first.failed("small", down("rate_limited"))
    await first.failed("small", down("rate_limited"))
    assert not await first.available("small") and not await second.available("small")
    await asyncio.sleep(BRIEF.open_seconds + 0.1)
    probes = [await second.available("small"), await first.available("small")]
    assert probes == [True, False], "exactly one replica probes"
    await second.succeeded("small")
    assert await first.available("small") and await second.available("small")
    # a failed probe opens it again at once
    await first.failed("small", down())
    await first.failed("small", down())
    await asyncio.sleep(BRIEF.open_seconds + 0.1)
    assert await first.available("small")
    await first.failed("small", down())
    assert not await second.available("small")


async def test_a_refused_request_does_not_count_towards_the_breaker(
    replicas: tuple[SharedBreakers, SharedBreakers],
) -> None:
    first, second = replicas
    for _ in range(3):
        await first.failed("small", down("refused"))
    assert await second.available("small")
    assert await second.repo.breaker("small") is None
