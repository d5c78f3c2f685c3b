"""A SIGKILL while a reply waits for pacing (issue 12): a ``gateway run`` process is killed
while its reply to a paced chat waits for the chat's slot, on a platform without idempotency
keys (as Telegram and Slack are). Nothing of that reply went out, so the restarted process
sends it, once, instead of failing it as ambiguous. A reply killed after it went on the wire
is still ambiguous: never resent blindly."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import httpx
import pytest

from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow


def _env(database_url: str, sink: SinkServer, pace: float) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
        "SINK_URL": sink.url,
        "SINK_PACE_SECONDS": str(pace),  # one call per chat per this many seconds
        "GATEWAY_LEASE_SECONDS": "30",  # takeover is by the process's liveness, not the lease
        "GATEWAY_WEB_CHAT": "false",
    }


async def _post(url: str, thread: str, text: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{url}/sink/inbound", json={"chat": "c", "thread": thread, "id": thread, "text": text}
        )
        assert response.json()["status"] == "accepted"


async def _deliveries(database_url: str) -> dict[str, asyncpg.Record]:
    """The reply's delivery row per thread."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            """SELECT d.target->>'thread_id' AS thread, d.status, d.ambiguous, d.attempts,
                      d.pacing_until IS NOT NULL AS pacing, d.last_error
               FROM deliveries d ORDER BY d.id"""
        )
    finally:
        await conn.close()
    return {r["thread"]: r for r in rows}


async def test_a_reply_killed_while_it_waited_for_pacing_is_sent_once_after_the_restart(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    async with gateway_process(_env(database_url, sink, 60), tmp_path / "a.log") as a:
        await _post(a.url, "first", "one")
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20)
        # the chat's slot is taken for a minute: this reply waits for it, marked as waiting
        await _post(a.url, "second", "two")

        async def waiting() -> bool:
            row = (await _deliveries(database_url)).get("second")
            return row is not None and row["status"] == "sending" and row["pacing"]

        await wait_for(waiting, timeout=20)
        a.kill()
        await a.proc.wait()
    assert len(sink.received) == 1

    async with gateway_process(_env(database_url, sink, 60), tmp_path / "b.log") as b:
        await wait_for(lambda: len(sink.accepted) == 2, timeout=20)
        rows = await _deliveries(database_url)
        assert await b.terminate() == 0
    assert sink.texts_in("c", "first") == ["echo: one"]
    assert sink.texts_in("c", "second") == ["echo: two"]
    assert len(sink.received) == 2  # nothing was sent twice, nothing else was tried
    second = rows["second"]
    assert (second["status"], second["ambiguous"], second["pacing"]) == ("sent", False, False)
    assert second["attempts"] == 2  # the killed claim and the one that sent it


async def test_a_reply_killed_on_the_wire_after_its_pacing_wait_stays_ambiguous(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    # the first send is answered at once; the second is posted but its answer held back
    sink.script.extend([("ok",), ("timeout", 6)])
    async with gateway_process(_env(database_url, sink, 1.5), tmp_path / "a.log") as a:
        await _post(a.url, "first", "one")
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20)
        await _post(a.url, "second", "two")
        # it waited for pacing, then went on the wire: killed while the platform holds it
        await wait_for(lambda: len(sink.received) == 2, timeout=20)
        a.kill()
        await a.proc.wait()

    async with gateway_process(_env(database_url, sink, 1.5), tmp_path / "b.log") as b:

        async def failed() -> asyncpg.Record | None:
            row = (await _deliveries(database_url)).get("second")
            return row if row is not None and row["status"] == "failed" else None

        second = await wait_for(failed, timeout=20)
        assert await b.terminate() == 0
    assert second["ambiguous"] and not second["pacing"]
    assert "ambiguous" in second["last_error"]
    assert sink.texts_in("c", "second") == ["echo: two"]  # posted once, never resent
    assert len(sink.received) == 2
