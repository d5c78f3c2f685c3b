"""Routing that asks: when keyword routing is unsure, one short side query (the real OpenAI
client against the OpenAI-compatible fake) asks which tool families the message needs. Its
answer picks the bundle and its tokens go into the usage ledger; a 5xx or a late answer
offers the read-only bundle."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import asyncpg
import pytest

from gateway.agents.openai import OpenAIAgent
from gateway.agents.prompt import estimate_text
from gateway.agents.retry import RetryPolicy
from gateway.core.config_file import ConfigFile
from gateway.core.metrics import Metrics
from gateway.tools.asking import FamilyAsker
from gateway.tools.builtin import DEFAULT_POLICIES
from gateway.tools.catalog import ToolCaller, ToolsFile
from gateway.tools.routing import READ_ONLY_BUNDLE
from gateway.tools.service import ToolService
from gateway.usage.config import usage_config
from gateway.usage.service import UsageService
from session_store.store import Store
from testsupport.fakes.openai import FakeOpenAI, Step

from ...unit.tools.test_routing import _tool

TICKETS = {
    "domains": ["tickets"],
    "operation": "write",
    "risk": "medium",
    "confirm": True,
    "aliases": ["jira", "file a bug"],
}
CALLER = ToolCaller(
    session_id=1, platform="web", scope="local", chat_id="general", thread_id="t", user_id="u"
)
#: nothing in it matches a tool's name or alias: keyword confidence 0
UNSURE = "the login page breaks on Safari since this morning, can someone track it"
PRICES = ConfigFile(
    tables={
        "prices": {
            "big": {"input": 10, "output": 30},
            "small": {"input": 0.1, "output": 0.2},
        }
    }
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def agent(fake: FakeOpenAI) -> AsyncIterator[OpenAIAgent]:
    client = OpenAIAgent(
        base_url=fake.base_url,
        api_key="sk-test",
        model="big",
        policy=RetryPolicy(deadline=8.0, base=0.1),
    )
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    opened = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        yield opened
    finally:
        await opened.close()


def _service(store: Store, agent: OpenAIAgent, *, timeout: float = 2.0) -> ToolService:
    metrics = Metrics()
    tools = ToolService(
        store,
        tools_file=ToolsFile(entries={"jira.create_issue": TICKETS}),
        metrics=metrics,
        extra=[_tool("jira.create_issue")],
    )
    usage = UsageService(store, usage_config(PRICES), metrics)

    def cheapest(models: object) -> str:
        prices = usage.config.prices
        return min(models, key=lambda m: prices.cost(m, 1000, 1000) or 0)  # type: ignore[call-overload]

    tools.asker = FamilyAsker(
        agent=agent, below=0.5, timeout=timeout, cheapest=cheapest, charge=usage.charge_place
    )
    return tools


async def _route(tools: ToolService, text: str) -> tuple[tuple[str, ...] | None, object]:
    first = tools.prepare(CALLER, text, count=estimate_text)
    families = await tools.ask_families(
        first.bundle.decision, CALLER, text, models=("big", "small"), place="web:local:general"
    )
    prepared = (
        first
        if families is None
        else tools.prepare(CALLER, text, count=estimate_text, asked=families)
    )
    return families, prepared.bundle


async def _ledger(database_url: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetch(
            "SELECT place, model, prompt_tokens, completion_tokens, cost FROM usage_ledger"
        )
    finally:
        await conn.close()


async def test_an_unsure_message_asks_the_cheapest_model_and_gets_that_family(
    store: Store, fake: FakeOpenAI, agent: OpenAIAgent, database_url: str
) -> None:
    fake.script.append(Step(text="tickets", usage={"prompt_tokens": 90, "completion_tokens": 2}))
    families, bundle = await _route(_service(store, agent), UNSURE)
    assert families == ("tickets",)
    assert bundle.names == ("jira.create_issue",)  # type: ignore[attr-defined]
    assert bundle.decision.matched == ("asked:tickets",)  # type: ignore[attr-defined]
    [asked] = fake.requests
    assert asked.body["model"] == "small"  # the cheaper of the place's models
    assert "tickets" in asked.system and asked.contents("user") == [UNSURE]
    [charge] = await _ledger(database_url)
    assert charge["place"] == "web:local:general" and charge["model"] == "small"
    assert (charge["prompt_tokens"], charge["completion_tokens"]) == (90, 2)
    assert charge["cost"] is not None and charge["cost"] > 0


async def test_a_confident_message_makes_no_side_query(
    store: Store, fake: FakeOpenAI, agent: OpenAIAgent, database_url: str
) -> None:
    families, bundle = await _route(_service(store, agent), "file a bug: login 500s")
    assert families is None
    assert bundle.names == ("jira.create_issue",)  # type: ignore[attr-defined]
    assert fake.requests == [] and await _ledger(database_url) == []


async def test_a_failing_side_query_offers_the_read_only_bundle(
    store: Store, fake: FakeOpenAI, agent: OpenAIAgent, database_url: str
) -> None:
    fake.script.append(Step(status=503))
    families, bundle = await _route(_service(store, agent), UNSURE)
    assert families == ()
    assert len(fake.requests) == 1  # asked once, never retried
    names = bundle.names  # type: ignore[attr-defined]
    assert bundle.decision.phase == "explore"  # type: ignore[attr-defined]
    assert names and len(names) <= READ_ONLY_BUNDLE and "jira.create_issue" not in names
    assert all(DEFAULT_POLICIES[n].operation == "read" for n in names)
    assert await _ledger(database_url) == []


async def test_a_late_side_query_gives_up_at_its_timeout(
    store: Store, fake: FakeOpenAI, agent: OpenAIAgent, database_url: str
) -> None:
    fake.script.append(Step(text="tickets", delay=10.0))
    started = time.monotonic()
    families, bundle = await _route(_service(store, agent, timeout=0.5), UNSURE)
    assert time.monotonic() - started < 3.0
    assert families == ()
    assert bundle.decision.phase == "explore"  # type: ignore[attr-defined]
    assert "jira.create_issue" not in bundle.names  # type: ignore[attr-defined]
    assert await _ledger(database_url) == []
