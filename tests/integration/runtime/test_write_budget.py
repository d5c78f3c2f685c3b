"""The write budget of one message, counted on a real gateway (echo agent, sink surface) and
a real PostgreSQL: one ingest-answer-deliver cycle commits four transactions (store, claim,
finish, receipt; ``testsupport.write_budget``). A feature that adds a transaction per message
outside them fails here. A count, not a timing: it holds on a busy machine."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

import asyncpg
import pytest

import gateway.profiles.reload as reload_module
from gateway.agents.base import EchoAgent, Turn
from gateway.core.domain import Reply
from gateway.runtime.gateway import Gateway
from gateway.tools.approvals import ApprovalService
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for
from testsupport.write_budget import BUDGET, TransactionLog

#: the background loops (recovery, polls) look every 30 s at the soonest: none runs in the
#: second a cycle takes
QUIET: dict[str, Any] = {"GATEWAY_POLL_SECONDS": 30.0, "GATEWAY_LEASE_SECONDS": 120.0}


def quiet_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loops that look every second by design (answering config reloads, expiring
    approvals) look every 30 s here: their first look at start stays before the count, and
    none falls inside it however slow the machine (on a loaded one, the count's window
    reached the next second's look)."""
    monkeypatch.setattr(reload_module, "POLL_SECONDS", 30.0)
    monkeypatch.setattr(
        ApprovalService, "run", functools.partialmethod(ApprovalService.run, interval=30.0)
    )


async def _sent(database_url: str, n: int) -> bool:
    """``n`` deliveries marked sent (read on a connection of the test's own, not logged)."""
    conn = await asyncpg.connect(database_url)
    try:
        return bool(
            await conn.fetchval("SELECT count(*) >= $1 FROM deliveries WHERE status = 'sent'", n)
        )
    finally:
        await conn.close()


async def _cycle(
    database_url: str,
    sink: SinkServer,
    monkeypatch: pytest.MonkeyPatch,
    *,
    agent: EchoAgent | None = None,
    prepare: Any = None,
) -> TransactionLog:
    """The transactions of one message's cycle, from its ingest to its receipt, after a
    first message warmed the caches (settings, the knowledge lookup's "no bases" answer)."""
    log = TransactionLog()
    log.install(monkeypatch)
    quiet_loops(monkeypatch)
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent, prepare=prepare, **QUIET
    ) as gw:
        # the retention loop's first round runs at start (partitions made ahead, old months
        # dropped): on a loaded machine it came after the warm-up, inside the count. The
        # warm-up comes after it, so the caches it fills (kept two seconds) are fresh
        await wait_for(
            lambda: gw.retention.last_run is not None, timeout=20, message="retention's first run"
        )
        await adapter.submit({"chat": "c", "thread": "warm", "id": "m0", "text": "warm up"})
        await wait_for(lambda: _sent(database_url, 1), timeout=20, message="first reply")
        log.recording = True
        await adapter.submit({"chat": "c", "thread": "t1", "id": "m1", "text": "hello"})
        await wait_for(lambda: _sent(database_url, 2), timeout=20, message="second reply")
        # the receipt is the last write: nothing more belongs to this message
        await asyncio.sleep(0.3)
        log.recording = False
    assert [r["text"] for r in sink.accepted] == ["echo: warm up", "echo: hello"]
    return log


async def test_one_message_costs_four_transactions_one_of_each_kind(
    database_url: str, sink: SinkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await _cycle(database_url, sink, monkeypatch)
    assert log.over_budget() == [], log.transactions
    # and each of the four happened: the count is of a real cycle, not of nothing
    assert log.by_kind() == BUDGET, log.transactions


class _AuditingEcho(EchoAgent):
    """An echo that writes one row per answer in a transaction of its own: the kind of
    feature (a ledger, an audit line, a counter) the budget is there to catch."""

    def __init__(self) -> None:
        self.gateway: Gateway | None = None

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        assert self.gateway is not None
        async with self.gateway.store.db.connection() as conn:
            await conn.execute(
                "UPDATE sessions SET last_message_at = last_message_at WHERE id = $1",
                turn.session_id,
            )
        return await super().respond(turn)


async def test_a_write_outside_the_budget_is_caught(
    database_url: str, sink: SinkServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _AuditingEcho()

    def prepare(gateway: Gateway) -> None:
        agent.gateway = gateway

    log = await _cycle(database_url, sink, monkeypatch, agent=agent, prepare=prepare)
    over = log.over_budget()
    assert len(over) == 1 and over[0].startswith("other: 1 transactions, budget 0"), over
    assert "UPDATE sessions SET last_message_at" in over[0]
