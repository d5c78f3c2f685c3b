"""Each document gets a stored summary, written by the model (the fake OpenAI server, through
the real OpenAI agent) on the cold path: claimed once across workers, in parts when long,
tried again after a failure, charged to the place, cleared by a reindex, and given to a
whole-document question when the document does not fit the prompt."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.agents.openai import OpenAIAgent
from gateway.agents.retry import RetryPolicy
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.knowledge.service import Knowledge
from gateway.knowledge.summaries import (
    DocumentSummaryWorker,
    SummarySettings,
    parts_of,
    place_of_document,
)
from gateway.knowledge.whole import SUMMARY_HEADER
from tests.unit.knowledge.test_whole import HANDBOOK, TOPICS
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import running_gateway, wait_for
from testsupport.knowledge import drain

KEY = SessionKey(platform="p", scope="s", chat_id="c", thread_id="t")
TARGET = ReplyTarget(platform="slack", scope="T1", chat_id="C9", thread_id="171.5")
WRITTEN = "A travel policy: book two weeks ahead, hotels up to 150 euros, claims in 30 days."


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        for agent in AGENTS:
            await agent.aclose()
        AGENTS.clear()
        await server.stop()


#: the agents a test made (closed with its model server)
AGENTS: list[OpenAIAgent] = []


Charged = list[tuple[str, str, tuple[int, int]]]


def worker(k: Knowledge, fake: FakeOpenAI, charged: Charged, **kw: int) -> DocumentSummaryWorker:
    agent = OpenAIAgent(
        base_url=fake.base_url,
        api_key="sk-test",
        model="small",
        policy=RetryPolicy(deadline=10.0),
    )
    AGENTS.append(agent)

    async def charge(place: str, model_name: str, used: tuple[int, int]) -> None:
        charged.append((place, model_name, used))

    settings = SummarySettings(
        model="small", lease_seconds=30.0, poll_seconds=0.05, backoff_seconds=0.0, **kw
    )
    return DocumentSummaryWorker(
        k.store.summaries, k.store.whole, agent, settings, charge=charge, wake=k.summary_wake
    )


def summary_requests(fake: FakeOpenAI) -> list[str]:
    return [r.system for r in fake.requests if r.is_document_summary]


async def test_a_ready_document_gets_one_summary_charged_to_the_chat_it_was_shared_in(
    knowledge: Knowledge, model: FakeOpenAI
) -> None:
    added = await knowledge.add("travel.md", HANDBOOK.encode(), notify_target=TARGET)
    assert not await knowledge.store.summaries.claim(lease_seconds=30), "not ready yet"
    await drain(knowledge)
    model.summary_script.append(Step(text=WRITTEN))
    charged: Charged = []
    a, b = worker(knowledge, model, charged), worker(knowledge, model, charged)
    # two workers (two replicas) at once: one claims it, one model call
    done = await asyncio.gather(a.process_one(), b.process_one())
    assert sorted(done) == [False, True]
    state = await knowledge.store.summaries.state(added.document.id)
    assert state is not None and state.summary == WRITTEN and state.tries == 1
    assert len(summary_requests(model)) == 1
    request = next(r for r in model.requests if "stored summary" in r.system)
    assert all(t in request.contents("user")[0] for _, t in TOPICS), "the whole text was read"
    assert [(p, m) for p, m, _ in charged] == [("slack:T1:C9", "small")]
    assert charged[0][2][0] > 0, "the call's prompt tokens are charged"
    assert not await a.process_one(), "written once: nothing is due any more"


async def test_a_long_document_is_summarised_in_parts_then_folded(
    knowledge: Knowledge, model: FakeOpenAI
) -> None:
    added = await knowledge.add("travel.md", HANDBOOK.encode())
    await drain(knowledge)
    passages = await knowledge.store.whole.passages([added.document.id])
    parts, cut = parts_of([str(r["content"]) for r in passages], 250, 8)
    assert len(parts) >= 2 and not cut
    for n in range(len(parts)):
        model.summary_script.append(Step(text=f"part {n + 1} in short"))
    model.summary_script.append(Step(text=WRITTEN))
    charged: Charged = []
    assert await worker(knowledge, model, charged, input_tokens=250).process_one()
    systems = summary_requests(model)
    assert len(systems) == len(parts) + 1
    for n, system in enumerate(systems[:-1], start=1):
        assert system.startswith(f"You summarise part {n} of {len(parts)}")
    fold = model.requests[-1].contents("user")[0]
    assert all(f"part {n + 1} in short" in fold for n in range(len(parts)))
    state = await knowledge.store.summaries.state(added.document.id)
    assert state is not None and state.summary == WRITTEN
    assert len(charged) == len(parts) + 1 and {p for p, _, _ in charged} == {"kb:default"}


async def test_a_failed_summary_is_tried_again_then_given_up_after_three_tries(
    knowledge: Knowledge, model: FakeOpenAI
) -> None:
    added = await knowledge.add("menu.md", b"# Canteen\n\nSoup is served on Fridays.")
    await drain(knowledge)
    w = worker(knowledge, model, [])
    model.summary_script.extend([Step(status=400), Step(status=400)])
    assert await w.process_one() and await w.process_one()
    state = await knowledge.store.summaries.state(added.document.id)
    assert state is not None and state.summary is None and state.tries == 2
    assert state.error and "400" in state.error
    model.summary_script.append(Step(text="Soup on Fridays."))
    assert await w.process_one()
    state = await knowledge.store.summaries.state(added.document.id)
    assert state is not None and state.summary == "Soup on Fridays." and state.tries == 3
    # a third failure would have been the last: nothing is due after three tries
    other = await knowledge.add("hours.md", b"# Hours\n\nThe office opens at nine.")
    await drain(knowledge)
    model.summary_script.extend([Step(status=400)] * 3)
    for _ in range(3):
        assert await w.process_one()
    assert not await w.process_one()
    gone = await knowledge.store.summaries.state(other.document.id)
    assert gone is not None and gone.summary is None and gone.tries == 3


async def test_a_claim_whose_worker_died_is_taken_again_after_its_lease(
    knowledge: Knowledge,
) -> None:
    added = await knowledge.add("menu.md", b"# Canteen\n\nSoup is served on Fridays.")
    await drain(knowledge)
    first = await knowledge.store.summaries.claim(lease_seconds=0.2)
    assert first is not None and first.id == added.document.id
    assert await knowledge.store.summaries.claim(lease_seconds=0.2) is None, "held"
    await asyncio.sleep(0.3)
    again = await knowledge.store.summaries.claim(lease_seconds=30)
    assert again is not None and again.id == first.id and again.tries == 2
    # the first stored wins; the late worker's is not stored over it
    assert await knowledge.store.summaries.save(first.id, "one", "m")
    assert not await knowledge.store.summaries.save(first.id, "two", "m")


async def test_a_reindex_clears_the_summary_and_makes_it_due_again(
    knowledge: Knowledge,
) -> None:
    added = await knowledge.add("menu.md", b"# Canteen\n\nSoup is served on Fridays.")
    await drain(knowledge)
    due = await knowledge.store.summaries.claim(lease_seconds=30)
    assert due is not None and await knowledge.store.summaries.save(due.id, "Soup.", "m")
    assert await knowledge.store.reindex_document(added.document.id)
    assert await knowledge.store.summaries.claim(lease_seconds=30) is None, "not ready"
    await drain(knowledge)
    state = await knowledge.store.summaries.state(added.document.id)
    assert state is not None and state.summary is None and state.tries == 0
    assert await knowledge.store.summaries.claim(lease_seconds=30) is not None


async def test_a_whole_document_question_that_does_not_fit_gets_the_stored_summary(
    knowledge: Knowledge,
) -> None:
    added = await knowledge.add("travel.md", HANDBOOK.encode())
    await drain(knowledge)
    # without a summary: the openings and the best passages
    before = await knowledge.turns.for_turn(KEY, "Summarise the travel policy", token_budget=400)
    assert before is not None and "Summary of" not in before.prompt
    due = await knowledge.store.summaries.claim(lease_seconds=30)
    assert due is not None and await knowledge.store.summaries.save(due.id, WRITTEN, "small")
    found = await knowledge.turns.for_turn(KEY, "Summarise the travel policy", token_budget=400)
    assert found is not None
    assert found.trace["whole"]["mode"] == "partial"
    assert found.trace["whole"]["summaries"] == ["travel.md"]
    assert found.prompt.startswith(SUMMARY_HEADER)
    assert f"Summary of travel.md:\n{WRITTEN}" in found.prompt
    # the passages beside it are numbered from 1, as the citations resolve them
    assert all(p.document_id == added.document.id for p in found.passages)
    assert "[1] travel.md" in found.prompt or not found.passages
    # one that fits whole still gets the whole text, not the summary
    whole = await knowledge.turns.for_turn(KEY, "Summarise the travel policy", token_budget=20_000)
    assert whole is not None and whole.trace["whole"]["mode"] == "whole"
    assert "Summary of" not in whole.prompt


def test_the_place_that_pays_for_a_summary() -> None:
    target = {"platform": "telegram", "scope": "bot1", "chat_id": "-100", "thread_id": "7"}
    assert place_of_document("thread:x", target) == "telegram:bot1:-100"
    assert place_of_document("handbook", None) == "kb:handbook"
    assert place_of_document("handbook", {"platform": "web"}) == "kb:handbook"


async def test_a_running_gateway_summarises_an_added_document_and_charges_the_base(
    database_url: str, model: FakeOpenAI
) -> None:
    model.summary_script.append(Step(text=WRITTEN))
    agent = OpenAIAgent(base_url=model.base_url, api_key="sk-test", model="small")
    AGENTS.append(agent)
    async with running_gateway(database_url, agent=agent, AGENT_MODEL="small") as gw:
        added = await gw.knowledge.add("travel.md", HANDBOOK.encode(), kb="handbook")

        async def summary() -> str | None:
            state = await gw.knowledge.store.summaries.state(added.document.id)
            return None if state is None else state.summary

        assert await wait_for(summary, timeout=60) == WRITTEN
        async with gw.store.db.connection() as conn:
            rows = await conn.fetch(
                "SELECT place, model, kind, prompt_tokens FROM usage_ledger WHERE kind = 'summary'"
            )
        assert [(r["place"], r["model"], r["kind"]) for r in rows] == [
            ("kb:handbook", "small", "summary")
        ]
        assert rows[0]["prompt_tokens"] > 0
