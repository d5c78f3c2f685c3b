"""The gateway as an MCP server: create_session, a batch append, and reads of
summaries, checkpoints, artifacts and participants (a real MCP client over HTTP)."""

from __future__ import annotations

from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from testsupport.harness import running_gateway


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def test_create_batch_append_and_super_session_reads(database_url: str) -> None:
    async with running_gateway(database_url, web_chat=False) as gw:
        async with (
            httpx2.AsyncClient() as http,
            Client(streamable_http_client(f"{gw.url}mcp", http_client=http)) as client,
        ):
            made = await call(
                client,
                "create_session",
                platform="web",
                scope="local",
                chat="planning",
                thread="q3",
                participant="planner",
                title="Q3 plan",
            )
            again = await call(
                client,
                "create_session",
                platform="web",
                scope="local",
                chat="planning",
                thread="q3",
                participant="helper",
            )
            assert made["created"] is True and again["created"] is False
            assert (
                again["session_id"] == made["session_id"] and made["key"] == "web:local:planning:q3"
            )
            sid = made["session_id"]
            batch = await call(
                client,
                "append_session_messages",
                session=sid,
                participant="planner",
                messages=[
                    {"content": "step one", "role": "assistant"},
                    {"content": "a note from ann", "role": "user"},
                    {"content": "step two", "model": "planner-1"},
                ],
            )
            assert batch["seq_nos"] == [1, 2, 3]
            bad = await client.call_tool(
                "append_session_messages",
                {"session": sid, "participant": "planner", "messages": []},
            )
            assert bad.is_error  # validated before anything is written
            await call(client, "update_checkpoint", session=sid, name="draft", status="done")
            await call(
                client, "create_session_summary", session=sid, from_seq=1, to_seq=3, content="s"
            )
            await call(
                client, "link_session_artifact", session=sid, kind="doc", name="plan", uri="x:y"
            )
            summaries = await call(client, "get_session_summaries", session="web:local:planning:q3")
            checkpoints = await call(client, "get_session_checkpoints", session=sid)
            artifacts = await call(client, "get_session_artifacts", session=sid)
            participants = await call(client, "get_session_participants", session=sid)
            delta = await call(client, "get_session_delta", session=sid)
    assert [(s["from_seq"], s["to_seq"]) for s in summaries["summaries"]] == [(1, 3)]
    assert [(c["name"], c["status"]) for c in checkpoints["checkpoints"]] == [("draft", "done")]
    assert [a["name"] for a in artifacts["artifacts"]] == ["plan"]
    people = {p["participant"]: p["last_read_seq"] for p in participants["participants"]}
    assert people == {"planner": 3, "helper": 0}
    assert [m["content"] for m in delta["messages"]] == ["step one", "a note from ann", "step two"]
