"""External MCP servers from the tools file, over stdio and streamable HTTP, with a real MCP
server written with the SDK (testsupport/mcp_server.py): discovered at start, only
tools with a policy entry offered, reconnected after the server restarts."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.agents.openai import OpenAIAgent
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for
from testsupport.paths import REPO

POLICIES = """
[tools."notes.read_note"]
domains = ["notes"]
operation = "read"
risk = "low"
aliases = ["note", "notes"]

[tools."notes.list_notes"]
domains = ["notes"]
operation = "read"
risk = "low"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServerProcess:
    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "testsupport.mcp_server",
            "--http",
            str(self.port),
            cwd=str(REPO),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )

        async def up() -> bool:
            try:
                async with httpx.AsyncClient() as client:
                    await client.get(self.url, timeout=0.5)
                return True
            except httpx.HTTPError:
                return False

        await wait_for(up, timeout=20, message="MCP test server did not start")

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServerProcess]:
    server = HttpServerProcess(free_port())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def read_call(n: int) -> Step:
    return Step(
        tool_calls=[
            {"name": "notes__read_note", "arguments": {"name": "standup"}, "id": f"n{n}"},
            {"name": "notes__delete_note", "arguments": {"name": "wifi"}, "id": f"d{n}"},
        ]
    )


async def tool_rows(gw: Any, session_id: int) -> list[dict[str, Any]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT content, metadata FROM messages WHERE session_id = $1 AND role = 'tool' "
            "ORDER BY seq_no",
            session_id,
        )
    return [{"content": r["content"], **r["metadata"]} for r in rows]


async def test_an_mcp_server_over_http_is_discovered_offered_by_policy_and_reconnected(
    database_url: str,
    fake: FakeOpenAI,
    sink: SinkServer,
    tmp_path: Path,
    http_server: HttpServerProcess,
) -> None:
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(
        f'[mcp.notes]\nurl = "{http_server.url}"\nexclude = ["internal_*"]\n'
        'headers = { "X-Test" = "1" }\ntimeout = 5\n' + POLICIES
    )
    adapter = SinkAdapter(sink.url)
    fake.script.extend([read_call(1), Step(text="10:30."), read_call(2), Step(text="Still 10:30.")])
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=str(tools_file),
    ) as gw:
        assert gw.tools is not None
        catalog = gw.tools.catalog
        assert {"notes.read_note", "notes.list_notes"} <= set(catalog.names)
        left_out = {x.name: x.reason for x in catalog.left_out}
        # internal_* excluded; the writes have no entry here
        assert left_out == {
            "notes.delete_note": "no policy entry",
            "notes.restart_service": "no policy entry",
        }
        out = await adapter.submit(
            {"chat": "c", "thread": "M", "id": "1", "text": "check the standup note"}
        )
        await wait_for(lambda: len(sink.accepted) == 1)
        first = await tool_rows(gw, out.session_id)
        # the server restarts: the gateway notices, withdraws its tools and reconnects
        [server] = gw.tools.servers
        await http_server.stop()
        await wait_for(lambda: "notes.read_note" not in catalog.names, timeout=15)
        await http_server.start()
        await wait_for(lambda: server.connections >= 2, timeout=20)
        await adapter.submit({"chat": "c", "thread": "M", "id": "2", "text": "the note again?"})
        await wait_for(lambda: len(sink.accepted) == 2)
        second = await tool_rows(gw, out.session_id)
    offered = fake.turn_requests[0].tool_names
    assert "notes__read_note" in offered and "notes__delete_note" not in offered
    assert first[0]["outcome"] == "ok" and "10:30 on Fridays" in first[0]["content"]
    assert first[1]["outcome"] == "refused"  # no policy entry: never runs
    assert second[2]["outcome"] == "ok" and "10:30" in second[2]["content"]
    assert sink.texts_in("c", "M") == ["10:30.", "Still 10:30."]


async def test_an_mcp_server_over_stdio_with_args_and_env(
    database_url: str, fake: FakeOpenAI, sink: SinkServer, tmp_path: Path
) -> None:
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(
        f'[mcp.notes]\ncommand = ["{sys.executable}"]\n'
        'args = ["-m", "testsupport.mcp_server"]\n'
        f'env = {{ PYTHONPATH = "{REPO}", NOTES_MODE = "ro" }}\n'
        'include = ["read_*", "list_*"]\nconnect_timeout = 20\n' + POLICIES
    )
    adapter = SinkAdapter(sink.url)
    fake.script.extend([read_call(1), Step(text="ok.")])
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS_FILE=str(tools_file),
    ) as gw:
        assert gw.tools is not None
        assert {"notes.read_note", "notes.list_notes"} <= set(gw.tools.catalog.names)
        assert gw.tools.catalog.left_out == []  # delete_note was not even included
        out = await adapter.submit({"chat": "c", "thread": "S", "id": "1", "text": "a note?"})
        await wait_for(lambda: len(sink.accepted) == 1)
        rows = await tool_rows(gw, out.session_id)
    assert rows[0]["outcome"] == "ok" and "mode ro" in rows[0]["content"]
    assert rows[1]["outcome"] == "refused"


async def test_doctor_lists_tools_left_out_for_lack_of_a_policy_entry(
    database_url: str, tmp_path: Path, http_server: HttpServerProcess, capsys: Any
) -> None:
    from gateway.ops.doctor import run_doctor
    from testsupport.harness import make_settings

    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(
        f'[mcp.notes]\nurl = "{http_server.url}"\n'
        f'[mcp.gone]\nurl = "http://127.0.0.1:{free_port()}/mcp"\nconnect_timeout = 1\n'
        + POLICIES
        + '[tools."notes.internal_debug"]\ndomains = ["x"]\noperation = "read"\n'
    )
    code = await run_doctor(make_settings(database_url, GATEWAY_TOOLS_FILE=str(tools_file)))
    out = capsys.readouterr().out
    # a note, not a failure: printed as ok with a tip naming the policy entry to add
    assert "ok  tool notes.delete_note: left out, never offered: no policy entry" in out
    assert "ok  tool notes.internal_debug: left out, never offered: malformed" in out
    assert "BAD mcp gone: cannot connect" in out
    assert "notes.read_note" in out.split("ok  tools:")[1].splitlines()[0]
    assert code == 1  # the unreachable server
