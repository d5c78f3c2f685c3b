"""A SIGKILL while a reply waits for pacing: a ``gateway run`` process is killed
while its reply to a paced chat waits for the chat's slot, on a platform without idempotency
keys (as Telegram and Slack are). Nothing of that reply went out, so the restarted process
sends it, once, instead of failing it as ambiguous. A reply killed after it went on the wire
is still ambiguous: never resent blindly."""

from __future__ import annotations

import json
import time
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

        async def recorded() -> dict[str, asyncpg.Record] | None:
            # the fake accepts the send before the gateway records its receipt
            found = await _deliveries(database_url)
            row = found.get("second")
            return found if row is not None and row["status"] != "sending" else None

        rows = await wait_for(recorded, timeout=20)
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


async def _rows_by_chat(database_url: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            """SELECT d.target->>'chat_id' AS chat, d.status, d.ambiguous, d.attempts,
                      d.pacing_until IS NOT NULL AS pacing, d.last_error
               FROM deliveries d ORDER BY d.id"""
        )
    finally:
        await conn.close()
    return {r["chat"]: r for r in rows}


async def _ask(url: str, chat: str, n: int = 1) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{url}/sink/inbound",
            json={"chat": chat, "thread": "t", "id": f"{chat}{n}", "text": chat},
        )
        assert response.json()["status"] == "accepted"


async def test_a_kill_resends_every_held_part_that_never_reached_the_wire_exactly_once(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    """A replica is SIGKILLed while it holds claimed parts in every off-wire state: parked
    until its chat's slot (``r``), whose slot came but no worker is free (``q``), and handed
    over by their finished turns with no worker free (``h1``, ``h2``); its two workers are
    on the wire (``w1``, ``w2``: posted, the answers held back). A platform without
    idempotency keys: the survivor sends every held part once, and only the two on the wire
    are ambiguous."""
    pace = 6.0
    env = _env(database_url, sink, pace) | {"GATEWAY_DELIVERY_WORKERS": "2"}
    async with gateway_process(env, tmp_path / "a.log") as a:
        await _ask(a.url, "q")
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20)
        q_sent = time.monotonic()
        await _ask(a.url, "q", 2)  # parked until q's slot, about 6 s on

        async def marked(*chats: str) -> bool:
            rows = await _rows_by_chat(database_url)
            return all(
                c in rows and rows[c]["status"] == "sending" and rows[c]["pacing"] for c in chats
            )

        await wait_for(lambda: time.monotonic() > q_sent + 2.5, timeout=10)
        await _ask(a.url, "r")
        await wait_for(lambda: len(sink.accepted) == 2, timeout=20)
        await _ask(a.url, "r", 2)  # parked until r's slot, after the kill
        # both workers go on the wire and stay there (the platform holds its answers)
        sink.script.extend([("timeout", 30), ("timeout", 30)])
        await _ask(a.url, "w1")
        await _ask(a.url, "w2")
        await wait_for(lambda: len(sink.received) == 4, timeout=20)
        await _ask(a.url, "h1")
        await _ask(a.url, "h2")
        await wait_for(lambda: marked("h1", "h2"), timeout=20)
        # q's slot comes: it waits for a worker, still off the wire
        await wait_for(lambda: time.monotonic() > q_sent + pace + 0.5, timeout=20)
        held = await _rows_by_chat(database_url)
        a.kill()
        await a.proc.wait()
    assert time.monotonic() < q_sent + 2.5 + pace, "too slow: r's slot came before the kill"
    assert {c: (r["status"], r["pacing"]) for c, r in held.items()} == {
        "q": ("sending", True),
        "r": ("sending", True),
        "w1": ("sending", False),
        "w2": ("sending", False),
        "h1": ("sending", True),
        "h2": ("sending", True),
    }
    assert len(sink.received) == 4

    async with gateway_process(_env(database_url, sink, pace), tmp_path / "b.log") as b:
        await wait_for(lambda: len(sink.received) == 8, timeout=30)

        async def settled() -> bool:
            return {r["status"] for r in (await _rows_by_chat(database_url)).values()} <= {
                "sent",
                "failed",
            }

        await wait_for(settled, timeout=20)
        rows = await _rows_by_chat(database_url)
        assert await b.terminate() == 0
    recovered = [
        (e["requeued"], e["failed_ambiguous"])
        for e in map(json.loads, b.log().splitlines())
        if e.get("event") == "expired_sends_recovered"
    ]
    assert recovered == [(4, 2)]
    # every part reached the platform exactly once
    for chat in ("q", "r", "w1", "w2", "h1", "h2"):
        expected = [f"echo: {chat}"] * (2 if chat in ("q", "r") else 1)
        assert sink.texts_in(chat, "t") == expected, chat
    assert len(sink.received) == 8
    assert {c: (r["status"], r["ambiguous"]) for c, r in rows.items()} == {
        "q": ("sent", False),
        "r": ("sent", False),
        "w1": ("failed", True),
        "w2": ("failed", True),
        "h1": ("sent", False),
        "h2": ("sent", False),
    }
