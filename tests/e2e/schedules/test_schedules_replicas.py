"""Each firing once across replicas and restarts, against real ``gateway run`` processes: two
replicas share a seconds-level cron schedule (made through ``/api/v1/schedules``) and every
firing is sent once; then every replica is killed before a one-shot's time and one started
after it fires it once (less than an hour late)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest

from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for
from testsupport.process import gateway_process, gateway_processes

pytestmark = pytest.mark.slow


async def _firings(database_url: str, schedule_id: int) -> list[str]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT outcome FROM schedule_firings WHERE schedule_id = $1 ORDER BY due_at",
            schedule_id,
        )
        return [r[0] for r in rows]
    finally:
        await conn.close()


async def _asked(database_url: str, chat: str) -> list[str]:
    """The due times of the schedules' questions asked in ``chat``."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT m.metadata->>'due_at' FROM messages m JOIN sessions s ON s.id = m.session_id"
            " WHERE s.chat_id = $1 AND m.role = 'system' ORDER BY m.seq_no",
            chat,
        )
        return [r[0] for r in rows]
    finally:
        await conn.close()


async def test_two_replicas_send_each_firing_once_and_a_restart_fires_a_missed_one_once(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
        "SINK_URL": sink.url,
        "GATEWAY_POLL_SECONDS": "0.2",
        "GATEWAY_WEB_CHAT": "false",
    }
    async with (
        gateway_processes((env, tmp_path / "a.log"), (env, tmp_path / "b.log")) as (a, b),
        httpx.AsyncClient() as http,
    ):
        made = await http.post(
            f"{a.url}/api/v1/schedules",
            json={"place": "sink:test:c1:t1", "prompt": "tick", "cron": "* * * * * */2"},
        )
        assert made.status_code == 201, made.text
        tick = made.json()["id"]
        await wait_for(lambda: len(sink.texts_in("c1", "t1")) >= 5, timeout=60, message="5 ticks")
        assert (await http.delete(f"{b.url}/api/v1/schedules/{tick}")).status_code == 204
        # deleted: no firing is asked for any more (a replica firing it held its row, the
        # delete waited); the last ones asked are answered before the kill
        asked_by_now = len(await _asked(database_url, "c1"))
        await wait_for(
            lambda: len(sink.texts_in("c1", "t1")) >= asked_by_now, timeout=30, message="answers"
        )
        due = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
        once = await http.post(
            f"{b.url}/api/v1/schedules",
            json={"place": "sink:test:c2", "prompt": "while nobody ran", "at": due},
        )
        assert once.status_code == 201, once.text
        a.kill()
        b.kill()
        await a.proc.wait()
        await b.proc.wait()
    ticks = sink.texts_in("c1", "t1")
    assert set(ticks) == {"echo: tick"}
    # each firing (one due time) asked once and its answer posted once, whichever replica
    asked = await _asked(database_url, "c1")
    assert len(asked) == len(set(asked)) == len(ticks) >= 5
    await asyncio.sleep(max(0.0, (datetime.fromisoformat(due) - datetime.now(UTC)).total_seconds()))
    assert sink.texts_in("c2", None) == []  # nobody ran at its time
    async with gateway_process(env, tmp_path / "c.log") as c:
        await wait_for(lambda: sink.texts_in("c2", None), timeout=60, message="the missed one")
        await wait_for(
            lambda: _firings(database_url, once.json()["id"]), timeout=10, message="recorded"
        )
        await asyncio.sleep(1)  # a second firing would show by now
        assert await c.terminate() == 0
    assert sink.texts_in("c2", None) == ["echo: while nobody ran"]
    assert await _firings(database_url, once.json()["id"]) in (["queued"], ["sent"])
