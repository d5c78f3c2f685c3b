"""The usage ledger and budgets with a real gateway, the real OpenAI client code against the
fake OpenAI-compatible server, and the sink surface."""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.agents.openai import OpenAIAgent
from gateway.runtime.gateway import Gateway
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

PRICES = """
[prices."small"]
input = 1.0
output = 2.0
"""


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def config(tmp_path: Path, budgets: str = "") -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(PRICES + budgets)
    return path


def gateway_for(database_url: str, fake: FakeOpenAI, adapter: SinkAdapter, path: Path) -> Any:
    return running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="sk-test", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_STREAMING=False,
        GATEWAY_CONFIG_FILE=str(path),
    )


async def ledger(gw: Gateway) -> list[dict[str, Any]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch("SELECT * FROM usage_ledger ORDER BY id")
    return [dict(r) for r in rows]


async def seed(gw: Gateway, *, account: str | None, place: str, cost: str, tokens: int) -> None:
    async with gw.store.db.connection() as conn:
        await conn.execute(
            "INSERT INTO usage_ledger (account, place, model, kind, prompt_tokens, cost) "
            "VALUES ($1, $2, 'small', 'answer', $3, $4::numeric)",
            account,
            place,
            tokens,
            cost,
        )


async def handled(gw: Gateway, session_id: int, seq: int) -> bool:
    async with gw.store.db.connection() as conn:
        done = await conn.fetchval("SELECT turn_done_seq FROM sessions WHERE id = $1", session_id)
    return bool(done >= seq)


async def test_the_ledger_adds_up_to_what_the_model_server_reported(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    fake.script.extend([Step(usage=usage(1000, 200)), Step(usage=usage(3000, 500))])
    adapter = SinkAdapter(sink.url)
    async with gateway_for(database_url, fake, adapter, config(tmp_path)) as gw:
        await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "one"})
        await wait_for(lambda: len(sink.accepted) == 1)
        await adapter.submit({"chat": "c", "thread": "T", "id": "2", "text": "two"})
        await wait_for(lambda: len(sink.accepted) == 2)
        rows = await ledger(gw)
        async with gw.store.db.connection() as conn:
            # the version the rows were priced with, per model in SQL, an object in Python
            priced = await conn.fetchrow(
                "SELECT prices, prices->'small'->>'output' AS small_output FROM price_sets "
                "WHERE version = 1"
            )
    assert priced["prices"] == {"small": {"input": "1.0", "output": "2.0"}}
    assert priced["small_output"] == "2.0"
    assert [(r["prompt_tokens"], r["completion_tokens"]) for r in rows] == [
        (1000, 200),
        (3000, 500),
    ]
    assert sum(r["cost"] for r in rows) == Decimal("0.0014") + Decimal("0.004")
    assert {r["account"] for r in rows} == {"sink:test:tester"}
    assert {r["place"] for r in rows} == {"sink:test:c"}
    assert all(r["message_id"] is not None and r["price_version"] == 1 for r in rows)
    # the provider gets one opaque id for the person: a hash, never the name
    users = {r.body.get("user") for r in fake.requests}
    assert len(users) == 1
    [user] = users
    assert re.fullmatch(r"[0-9a-f]{32}", str(user)) and "tester" not in str(user)


async def test_the_answer_that_crosses_the_limit_is_the_last_one(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    fake.script.extend([Step(usage=usage(1000, 200)), Step(usage=usage(1000, 200))])
    adapter = SinkAdapter(sink.url)
    path = config(tmp_path, "[budgets]\nperson_per_day = 0.002\n")
    async with gateway_for(database_url, fake, adapter, path) as gw:
        for n in (1, 2):
            await adapter.submit({"chat": "c", "thread": "T", "id": str(n), "text": f"q{n}"})
            await wait_for(lambda n=n: len(sink.accepted) == n)  # type: ignore[misc]
        out = await adapter.submit({"chat": "c", "thread": "T", "id": "3", "text": "q3"})
        await wait_for(lambda: len(sink.accepted) == 3)
        assert len(fake.requests) == 2
        assert "person_per_day" in sink.texts_in("c", "T")[-1]
        assert gw.usage.metrics.budget_refusals.labels("person_per_day")._value.get() == 1
        # the question is stored though not answered
        messages = await gw.store.sessions.recent(out.session_id)
        assert any(m.content == "q3" and m.role == "user" for m in messages)


@pytest.mark.parametrize(
    ("budgets", "account", "place", "cost", "tokens", "limit"),
    [
        ("person_per_day = 0.001", "sink:test:tester", "other:x:y", "0.002", 0, "person_per_day"),
        (
            "person_tokens_per_day = 1000",
            "sink:test:tester",
            "other:x:y",
            "0",
            1500,
            "person_per_day",
        ),
        (
            "place_per_month = 0.001",
            "sink:test:someone",
            "sink:test:c",
            "0.002",
            0,
            "place_per_month",
        ),
        ("total_per_month = 0.001", "other:x:z", "other:x:y", "0.002", 0, "total_per_month"),
        (
            'place_per_month = 1.0\n[budgets.places."sink:*:c"]\nper_month = 0.001',
            None,
            "sink:test:c",
            "0.002",
            0,
            'places."sink:*:c"',
        ),
    ],
    ids=["person-cost", "person-tokens", "place", "total", "given-place"],
)
async def test_each_budget_refuses_before_the_model_is_asked_with_one_notice(
    database_url: str,
    fake: FakeOpenAI,
    sink: SinkServer,
    tmp_path: Path,
    budgets: str,
    account: str | None,
    place: str,
    cost: str,
    tokens: int,
    limit: str,
) -> None:
    adapter = SinkAdapter(sink.url)
    path = config(tmp_path, f"[budgets]\n{budgets}\n")
    async with gateway_for(database_url, fake, adapter, path) as gw:
        await seed(gw, account=account, place=place, cost=cost, tokens=tokens)
        await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "q1"})
        await wait_for(lambda: len(sink.accepted) == 1)
        [notice] = sink.texts_in("c", "T")
        assert limit in notice and "resets at" in notice
        # once per thread and period: the next question there is refused without another
        out = await adapter.submit({"chat": "c", "thread": "T", "id": "2", "text": "q2"})
        await wait_for(lambda: handled(gw, out.session_id, out.seq_no))
        assert len(sink.accepted) == 1
        # a question in another thread gets its own notice, never silence
        await adapter.submit({"chat": "c", "thread": "T2", "id": "3", "text": "q3"})
        await wait_for(lambda: len(sink.accepted) == 2, message="the notice in T2")
        assert sink.texts_in("c", "T2") == [notice]
    assert fake.requests == []


async def test_a_place_of_its_own_limit_leaves_other_places_alone(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    adapter = SinkAdapter(sink.url)
    path = config(tmp_path, '[budgets.places."sink:*:other"]\nper_month = 0.001\n')
    async with gateway_for(database_url, fake, adapter, path) as gw:
        await seed(gw, account=None, place="sink:test:c", cost="5", tokens=0)
        await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "q1"})
        await wait_for(lambda: len(sink.accepted) == 1)
    assert sink.texts_in("c", "T") == ["re: q1"]


async def test_an_unreadable_ledger_fails_closed(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    adapter = SinkAdapter(sink.url)
    path = config(tmp_path, "[budgets]\ntotal_per_month = 100\n")
    async with gateway_for(database_url, fake, adapter, path) as gw:
        async with gw.store.db.connection() as conn:
            # reading the ledger fails; writing through the (updatable) view still works
            await conn.execute("ALTER TABLE usage_ledger RENAME TO usage_ledger_real")
            await conn.execute(
                "CREATE VIEW usage_ledger AS SELECT * FROM usage_ledger_real "
                "WHERE 1 / (SELECT count(*) FROM pg_class WHERE false) = 1"
            )
        await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "q1"})
        await wait_for(lambda: len(sink.accepted) == 1)
        assert gw.usage.metrics.budget_refusals.labels("unavailable")._value.get() == 1
    assert fake.requests == []
    assert "unavailable" in sink.texts_in("c", "T")[0]


async def test_link_and_usage_commands_in_a_chat(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    fake.script.append(Step(usage=usage(1000, 200)))
    adapter = SinkAdapter(sink.url)
    path = config(tmp_path, "[budgets]\nperson_per_day = 1.0\n")
    async with gateway_for(database_url, fake, adapter, path):
        await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "hello"})
        await wait_for(lambda: len(sink.accepted) == 1)
        await adapter.submit({"chat": "c", "thread": "T", "id": "2", "text": "/link"})
        await wait_for(lambda: len(sink.accepted) == 2)
        assert "direct message" in sink.texts_in("c", "T")[-1]  # never a code in a group
        body = {"chat": "dm", "id": "3", "text": "/link", "direct": True}
        await adapter.submit(body)
        await wait_for(lambda: len(sink.accepted) == 3)
        offered = sink.texts_in("dm", None)[-1]
        code = re.search(r"code is ([A-Z0-9]{8})", offered)
        assert code is not None, offered
        other = {"chat": "dm2", "id": "4", "text": f"/link {code[1]}", "user": "ann"}
        await adapter.submit(other)
        await wait_for(lambda: len(sink.accepted) == 4)
        assert sink.texts_in("dm2", None)[-1].startswith("Linked")
        # the other account sees the first one's spend as its own, and the limit
        await adapter.submit({"chat": "dm2", "id": "5", "text": "/usage", "user": "ann"})
        await wait_for(lambda: len(sink.accepted) == 5)
        assert fake.requests and len(fake.requests) == 1
    answer = sink.texts_in("dm2", None)[-1]
    assert "Today: 0.0014 spent, 1200 tokens." in answer
    assert "Your daily limit: 1.0" in answer


async def test_over_budget_every_web_chat_question_gets_its_notice(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Each question typed in the web chat's channel opens a thread of its own: over budget,
    each gets the notice in its thread (it did once per person and place, so the second
    question hung with no answer)."""
    path = config(tmp_path, "[budgets]\ntotal_per_month = 0.001\n")
    async with (
        running_gateway(
            database_url,
            agent=OpenAIAgent(base_url=fake.base_url, api_key="sk-test", model="small"),
            AGENT_MODEL="small",
            GATEWAY_STREAMING=False,
            GATEWAY_CONFIG_FILE=str(path),
        ) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as web,
    ):
        await seed(gw, account=None, place="other:x:y", cost="0.002", tokens=0)
        threads = []
        for n in (1, 2):
            posted = await web.post(
                "/web/api/channels/general/messages",
                json={"text": f"question {n}", "client_msg_id": f"q{n}"},
            )
            assert posted.status_code == 200, posted.text
            threads.append(posted.json()["thread_id"])

        async def answers(thread: str) -> list[str]:
            got = await web.get(f"/web/api/channels/general/threads/{thread}/messages")
            return [m["content"] for m in got.json()["messages"] if m["role"] == "assistant"]

        for thread in threads:
            [notice] = await wait_for(functools.partial(answers, thread), message=thread)
            assert "total_per_month" in notice and "resets at" in notice
    assert len(set(threads)) == 2 and fake.requests == []
