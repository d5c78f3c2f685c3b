"""Takeover in seconds: a ``gateway run`` process killed mid-turn (SIGKILL) loses its
liveness lock with its connection, and its turn is taken over within 2 s, by a restarted
process or by another replica, instead of after the 30 s lease. A live but slow owner is
never robbed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from benchmarks.fakes.sink_server import SinkServer
from tests.e2e.process import gateway_process
from tests.support import wait_for

pytestmark = pytest.mark.slow

TAKEOVER_BOUND = 2.0


def _env(database_url: str, sink: SinkServer, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "benchmarks.fakes.sink:create",
        "SINK_URL": sink.url,
        "GATEWAY_LEASE_SECONDS": "30",  # the default: takeover must not wait for it
        "GATEWAY_WEB_CHAT": "false",
        **extra,
    }


async def _turn_holder(database_url: str) -> tuple[str | None, int | None]:
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow("SELECT turn_owner::text, turn_process FROM sessions")
        return (None, None) if row is None else (row[0], row[1])
    finally:
        await conn.close()


async def _post(url: str, thread: str, text: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{url}/sink/inbound", json={"chat": "c", "thread": thread, "id": "1", "text": text}
        )
        assert response.json()["status"] == "accepted"


async def test_a_live_slow_owner_is_not_robbed_and_a_killed_one_is_taken_over_by_a_replica(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    slow = _env(database_url, sink, AGENT="tests.plugins.agents:SlowAgent")
    async with gateway_process(slow, tmp_path / "a.log") as a:
        await _post(a.url, "K", "q")

        async def claimed() -> tuple[str | None, int | None] | None:
            holder = await _turn_holder(database_url)
            return holder if holder[0] is not None else None

        found = await wait_for(claimed, timeout=20)
        assert found is not None
        owner, process = found
        assert process is not None
        async with gateway_process(_env(database_url, sink), tmp_path / "b.log"):
            # B polls for turns many times over 3 s: A is alive (slow), so it keeps its turn
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                assert await _turn_holder(database_url) == (owner, process)
                assert sink.accepted == []
                await asyncio.sleep(0.2)
            a.kill()
            await a.proc.wait()
            killed = time.monotonic()
            await wait_for(lambda: len(sink.accepted) == 1, timeout=15)
            takeover = time.monotonic() - killed
    print(f"\ntakeover by a live replica {takeover:.2f}s after SIGKILL")
    assert takeover <= TAKEOVER_BOUND, f"taken over after {takeover:.2f}s"
    assert sink.texts_in("c", "K") == ["echo: q"]


async def test_sigkill_mid_turn_then_restart_answers_within_two_seconds(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    slow = _env(database_url, sink, AGENT="tests.plugins.agents:SlowAgent")
    async with gateway_process(slow, tmp_path / "one.log") as gw:
        await _post(gw.url, "R", "again?")

        async def claimed() -> bool:
            return (await _turn_holder(database_url))[0] is not None

        await wait_for(claimed, timeout=20)
        gw.kill()
        await gw.proc.wait()

    async with gateway_process(_env(database_url, sink), tmp_path / "two.log") as gw:
        ready = time.monotonic()
        await wait_for(lambda: len(sink.accepted) == 1, timeout=15)
        takeover = time.monotonic() - ready
        assert await gw.terminate() == 0
    print(f"\nanswered {takeover:.2f}s after the restarted process was ready")
    assert takeover <= TAKEOVER_BOUND, f"answered after {takeover:.2f}s"
    assert sink.texts_in("c", "R") == ["echo: again?"]
