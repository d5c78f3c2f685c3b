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

from gateway.inbound.intake import to_inbound
from session_store.errors import StoreError
from session_store.records import TurnClaim
from session_store.repos.liveness import ProcessLiveness
from session_store.store import Store
from testsupport.fakes.sink import sink_envelope
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for
from testsupport.pg import own_postgres
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

TAKEOVER_BOUND = 2.0


def _env(database_url: str, sink: SinkServer, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
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
    slow = _env(database_url, sink, AGENT="testsupport.agents:SlowAgent")
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
    slow = _env(database_url, sink, AGENT="testsupport.agents:SlowAgent")
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


# --- after a database restart (every liveness lock dropped at once) -------------------------


async def _claimed_by(pg_dsn: str, who: ProcessLiveness, thread: str) -> Store:
    """A store acting for process ``who`` that holds the turn of ``thread``."""
    store = await Store.connect(pg_dsn, min_size=1, max_size=2)
    store.process_id = await who.ensure()
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": thread, "id": thread, "text": "q"})),
        raw=None,
    )
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None and claim.key.thread_id == thread
    return store


async def _claim_after_restart(store: Store) -> TurnClaim | None:
    """The first claim that reaches the restarted server (the pool's connections died)."""
    for _ in range(200):
        try:
            return await store.turns.claim_turn(lease_seconds=30)
        except StoreError:
            await asyncio.sleep(0.1)
    raise AssertionError("the store never reached the restarted server")


async def test_after_a_database_restart_a_process_that_relocked_and_died_is_taken_over_at_once(
    tmp_path: Path,
) -> None:
    """The 2.23 s worst SIGKILL recovery of the long campaign: a replica killed shortly after
    a database restart, whose turn then waited for a 3 s grace after the server's start. A
    process that re-locked since the restart and lost its lock is dead: no grace."""
    async with own_postgres() as pg:
        dying, taker = ProcessLiveness(pg.dsn), ProcessLiveness(pg.dsn)
        owner = await _claimed_by(pg.dsn, dying, "dies-after-relock")
        other = await Store.connect(pg.dsn, min_size=1, max_size=2)
        try:
            await pg.stop()
            await pg.start()
            # both re-lock at once, as the liveness loop does within 0.1 s of the return
            await wait_for(lambda: _relocked(dying), timeout=20)
            await wait_for(lambda: _relocked(taker), timeout=20)
            other.process_id = await taker.ensure()
            # the claim's owner is live and re-locked: not robbed
            assert await _claim_after_restart(other) is None
            await dying.close()  # its process dies
            # taken over at the first claim, while every lock in this lifetime is fresh
            # (the grace for processes that have not re-locked yet has not run out)
            claim = await other.turns.claim_turn(lease_seconds=30)
            assert claim is not None and claim.key.thread_id == "dies-after-relock"
        finally:
            await owner.close()
            await other.close()
            await taker.close()


async def test_after_a_database_restart_an_owner_that_never_relocks_is_taken_over(
    tmp_path: Path,
) -> None:
    """A process killed while the database was down never re-locks: once the others have
    had their moment to re-lock, its turn is taken over (long before its 30 s lease)."""
    async with own_postgres() as pg:
        dead, taker = ProcessLiveness(pg.dsn), ProcessLiveness(pg.dsn)
        owner = await _claimed_by(pg.dsn, dead, "killed-during-outage")
        other = await Store.connect(pg.dsn, min_size=1, max_size=2)
        try:
            await pg.stop()
            await pg.start()
            await wait_for(lambda: _relocked(taker), timeout=20)
            other.process_id = await taker.ensure()
            await _claim_after_restart(other)

            async def taken() -> TurnClaim | None:
                return await other.turns.claim_turn(lease_seconds=30)

            claim = await wait_for(taken, timeout=10)
            assert claim is not None and claim.key.thread_id == "killed-during-outage"
        finally:
            await owner.close()
            await other.close()
            await dead.close()
            await taker.close()


async def _relocked(liveness: ProcessLiveness) -> bool:
    try:
        await liveness.ensure()
    except StoreError:
        return False
    return True
