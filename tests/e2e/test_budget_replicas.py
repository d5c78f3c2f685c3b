"""Two ``gateway run`` replicas answering at once near a budget: the limit holds within the
stated bound (at most one answer per turn running when it was reached), the ledger adds up to
what the model server reported, and the asker is told once in each thread refused."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

import asyncpg
import httpx
import pytest

from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

REPLICAS = 2
WORKERS = 2
#: each answer costs 1000 prompt tokens at 1.0 per million
ANSWER = Decimal("0.001")
LIMIT = Decimal("0.0035")
QUESTIONS = 12


async def _all_handled(database_url: str) -> bool:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT turn_requested_seq, turn_done_seq FROM sessions")
    finally:
        await conn.close()
    return len(rows) == QUESTIONS and all(r[1] >= r[0] for r in rows)


async def _spent(database_url: str) -> tuple[Decimal, int]:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow("SELECT coalesce(sum(cost), 0), count(*) FROM usage_ledger")
    finally:
        await conn.close()
    assert row is not None
    return row[0], row[1]


async def test_two_replicas_near_a_limit_overshoot_by_at_most_the_running_turns(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    fake = await FakeOpenAI().start()
    fake.script.extend(
        Step(delay=0.5, usage={"prompt_tokens": 1000, "completion_tokens": 0, "total_tokens": 1000})
        for _ in range(QUESTIONS)
    )
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[prices."small"]\ninput = 1.0\noutput = 1.0\n[budgets]\ntotal_per_month = {LIMIT}\n'
    )
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
        "SINK_URL": sink.url,
        "GATEWAY_WEB_CHAT": "false",
        "GATEWAY_STREAMING": "false",
        "GATEWAY_TURN_WORKERS": str(WORKERS),
        "GATEWAY_CONFIG_FILE": str(config),
        "AGENT": "openai",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "sk-test",
        "AGENT_MODEL": "small",
    }
    try:
        async with (
            gateway_process(env, tmp_path / "a.log") as a,
            gateway_process(env, tmp_path / "b.log") as b,
            httpx.AsyncClient() as client,
        ):
            posts = [
                client.post(
                    f"{(a, b)[n % REPLICAS].url}/sink/inbound",
                    json={"chat": "c", "thread": f"T{n}", "id": str(n), "text": f"q{n}"},
                )
                for n in range(QUESTIONS)
            ]
            for response in await asyncio.gather(*posts):
                assert response.json()["status"] == "accepted"
            await wait_for(lambda: _all_handled(database_url), timeout=60)
            spent, rows = await _spent(database_url)
    finally:
        await fake.stop()
    answered = [t for t in (b.get("text", "") for b in sink.accepted) if t.startswith("re: ")]
    notices = [
        b["target"]["thread_id"] for b in sink.accepted if "total_per_month" in b.get("text", "")
    ]
    bound = LIMIT + REPLICAS * WORKERS * ANSWER
    print(f"\nanswered {len(answered)}, spent {spent} (limit {LIMIT}, bound {bound})")
    # the ledger is what the model server reported: one row per call, its cost
    assert rows == len(fake.requests) == len(answered)
    assert spent == len(answered) * ANSWER
    # the limit was reached, and overshot by at most the turns running then
    assert LIMIT <= spent <= bound
    # once per limit, person and period in each thread: every question here has a thread of
    # its own, so each one refused is told, once
    assert len(notices) == len(set(notices)) == QUESTIONS - len(answered)
