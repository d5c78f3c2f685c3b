"""One MCP server: `gateway mcp` (stdio, a real subprocess driven by the MCP client's stdio
client) and a running gateway's `/mcp` (streamable HTTP) list the same tools, with the same
descriptions and argument schemas, and the knowledge-base, schedule and profile tools work
over stdio against the same database."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters, stdio_client

from gateway.knowledge.mcp import KB_TOOLS
from gateway.schedules.api import SCHEDULE_TOOLS
from testsupport.harness import running_gateway, wait_for
from testsupport.paths import REPO


def _listing(tools: Any) -> dict[str, tuple[str, Any]]:
    return {t.name: (t.description, t.input_schema) for t in tools}


async def _call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content}"
    assert result.structured_content is not None
    return dict(result.structured_content)


@asynccontextmanager
async def _stdio(database_url: str, tmp_path: Path) -> AsyncIterator[Client]:
    env = {
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPO),
        "GATEWAY_LOG_FORMAT": "json",
        "PATH": os.environ.get("PATH", ""),
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gateway", "mcp"], env=env, cwd=str(REPO)
    )
    with (tmp_path / "mcp-stderr.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


async def test_stdio_and_http_list_the_same_tools_and_stdio_serves_them(
    database_url: str, tmp_path: Path
) -> None:
    async with running_gateway(database_url, web_chat=False) as gw:
        async with Client(f"{gw.url}mcp") as http:
            over_http = _listing((await http.list_tools()).tools)
            # a document indexed by the running gateway (its job worker), and a schedule
            up = await _call(
                http, "kb_upload", name="office.md", text="# Office\n\nThe office opens at nine."
            )

            async def ready() -> bool:
                docs = (await _call(http, "kb_list"))["documents"]
                return [d["state"] for d in docs] == ["ready"]

            await wait_for(ready, timeout=30)
            made = await _call(
                http,
                "schedule_create",
                place="web:local:general",
                prompt="standup notes",
                cron="0 9 * * 1-5",
            )

        async with _stdio(database_url, tmp_path) as stdio:
            over_stdio = _listing((await stdio.list_tools()).tools)
            found = await _call(stdio, "kb_search", query="when does the office open")
            schedules = await _call(stdio, "schedule_list")
            profile = await _call(stdio, "profile_show", place="web:local:general")
            sessions = await _call(stdio, "list_sessions")

    assert over_stdio == over_http
    # every family is there, not just the session tools
    assert set(KB_TOOLS) | set(SCHEDULE_TOOLS) | {"profile_show", "list_sessions"} <= set(
        over_stdio
    )
    assert len(over_stdio) >= 28
    assert found["passages"], found
    assert found["passages"][0]["document_id"] == up["id"]
    assert "nine" in found["passages"][0]["text"]
    assert [s["id"] for s in schedules["schedules"]] == [made["id"]]
    assert schedules["schedules"][0]["prompt"] == "standup notes"
    assert profile["place"] == "web:local:general"
    assert sessions["sessions"] == []
