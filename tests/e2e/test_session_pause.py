"""A paused session across a restart of the gateway: the pause holds, what arrives is stored
and not answered; ``gateway sessions resume`` answers it in one turn; ``/resume`` typed in the
thread does the same. A real ``gateway`` subprocess, the sink surface, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import httpx
import pytest

from gateway.turns.stages.commands import PAUSE_TEXT, RESUME_TEXT
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for
from testsupport.process import gateway_process, run_cli

pytestmark = pytest.mark.slow


async def _say(client: httpx.AsyncClient, url: str, n: int, text: str) -> None:
    response = await client.post(
        f"{url}/sink/inbound", json={"chat": "c", "thread": "P", "id": str(n), "text": text}
    )
    response.raise_for_status()


async def _status(database_url: str) -> list[tuple[str, int]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT status, message_count FROM sessions ORDER BY id")
    finally:
        await conn.close()
    return [(r["status"], r["message_count"]) for r in rows]


async def test_a_paused_session_holds_across_a_restart_and_resume_answers_once(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    logs = tmp_path
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
        "SINK_URL": sink.url,
        "GATEWAY_POLL_SECONDS": "0.2",
    }
    async with gateway_process(env, logs / "one.log") as gw, httpx.AsyncClient() as client:
        await _say(client, gw.url, 1, "q1")
        await wait_for(lambda: len(sink.accepted) == 1, timeout=30)
        await _say(client, gw.url, 2, "/pause")
        await wait_for(lambda: len(sink.accepted) == 2, timeout=30)
        await _say(client, gw.url, 3, "q2 while paused")
        assert await gw.terminate() == 0
    assert sink.texts_in("c", "P") == ["echo: q1", PAUSE_TEXT]

    async with gateway_process(env, logs / "two.log") as gw, httpx.AsyncClient() as client:
        await _say(client, gw.url, 4, "q3 after the restart")
        # stored, in the same (still paused) session: 4 user messages and 2 answers

        async def stored() -> bool:
            return await _status(database_url) == [("paused", 6)]

        await wait_for(stored, timeout=10)
        await asyncio.sleep(2)  # ten poll intervals: a turn would have been answered by now
        assert len(sink.accepted) == 2

        code, out, err = await run_cli(["sessions", "list", "--status", "paused", "--json"], env)
        assert code == 0, err
        [row] = json.loads(out)
        assert row["status"] == "paused"
        code, _, err = await run_cli(["sessions", "archive", str(row["id"])], env)
        assert code == 1 and "is paused; archive needs it closed" in err
        code, out, err = await run_cli(["sessions", "resume", str(row["id"])], env)
        assert code == 0 and ": active;" in out, err
        # what waited is answered in one turn (the echo agent answers the newest question)
        await wait_for(lambda: len(sink.accepted) == 3, timeout=30)
        await asyncio.sleep(1)
        assert sink.texts_in("c", "P")[2:] == ["echo: q3 after the restart"]

        # the same through the thread: /pause, a question, /resume
        await _say(client, gw.url, 5, "/pause")
        await wait_for(lambda: len(sink.accepted) == 4, timeout=30)
        await _say(client, gw.url, 6, "q4 while paused")
        await asyncio.sleep(1)
        assert len(sink.accepted) == 4
        await _say(client, gw.url, 7, "/resume")
        await wait_for(lambda: len(sink.accepted) == 6, timeout=30)
        assert await gw.terminate() == 0
    assert sink.texts_in("c", "P")[3:] == [PAUSE_TEXT, RESUME_TEXT, "echo: q4 while paused"]
