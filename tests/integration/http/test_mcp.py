"""The MCP session tools, driven by the MCP SDK's own client: over streamable HTTP against a
running gateway (with a sink surface, so delivered messages really arrive in their thread),
and over stdio against a `gateway mcp` subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey
from gateway.inbound.intake import to_inbound
from gateway.knowledge.mcp import KB_TOOLS
from gateway.schedules.api import SCHEDULE_TOOLS
from session_store.store import Store
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for
from testsupport.paths import REPO

TOOLS = {
    "list_sessions",
    "get_session_delta",
    "search_session",
    "append_session_message",
    "update_checkpoint",
    "create_session_summary",
    "link_session_artifact",
    "link_session",
    "close_session",
    "mark_read",
    # the session tools' contract
    "create_session",
    "append_session_messages",
    "get_session_summaries",
    "get_session_checkpoints",
    "get_session_artifacts",
    "get_session_participants",
    # the lifecycle, topic/priority/tags, and the decisions
    "pause_session",
    "resume_session",
    "archive_session",
    "update_session",
    "get_session_decisions",
}


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {_text(result)}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def fails(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed: {result.structured_content}"
    return _text(result)


def _text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_an_agent_follows_and_takes_part_in_a_session_over_http(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        await adapter.submit({"chat": "c1", "thread": "T1", "id": "1", "text": "hello gateway"})
        await adapter.submit({"chat": "c1", "thread": "T2", "id": "2", "text": "other thread"})
        await wait_for(lambda: len(sink.accepted) == 2)
        key = "sink:test:c1:T1"

        async with Client(f"{gw.url}mcp") as client:
            listed = await client.list_tools()
            # the session tools, plus the knowledge base's (gateway/knowledge/mcp.py)
            # the knowledge base's, the schedules' and the profiles' tools come with the gateway
            expected = TOOLS | set(KB_TOOLS) | set(SCHEDULE_TOOLS) | {"profile_show"}
            assert {t.name for t in listed.tools} == expected

            sessions = await call(client, "list_sessions", platform="sink")
            assert {s["key"] for s in sessions["sessions"]} == {key, "sink:test:c1:T2"}
            page = await call(client, "list_sessions", limit=1)
            assert len(page["sessions"]) == 1 and page["next_cursor"]
            page2 = await call(client, "list_sessions", limit=1, cursor=page["next_cursor"])
            assert page2["sessions"][0]["id"] != page["sessions"][0]["id"]

            delta = await call(client, "get_session_delta", session=key, after_seq=0)
            assert [m["content"] for m in delta["messages"]] == [
                "hello gateway",
                "echo: hello gateway",
            ]
            assert delta["next_after_seq"] == 2 and not delta["has_more"]
            sid = delta["session_id"]
            assert delta["messages"][1]["delivery"] == [
                {"part": 1, "status": "sent", "error": None}
            ]

            # stored only, then delivered: the thread sees only the second, in T1 only
            quiet = await call(
                client,
                "append_session_message",
                session=sid,
                participant="reviewer",
                content="internal note",
            )
            assert quiet["seq_no"] == 3 and "delivery" not in quiet
            loud = await call(
                client,
                "append_session_message",
                session=key,
                participant="reviewer",
                content="a word from the reviewer",
                deliver=True,
            )
            assert loud["seq_no"] == 4 and loud["delivery"][0]["status"] in ("pending", "sent")
            await wait_for(lambda: len(sink.accepted) == 3)
            assert sink.texts_in("c1", "T1") == ["echo: hello gateway", "a word from the reviewer"]
            assert sink.texts_in("c1", "T2") == ["echo: other thread"]
            assert sink.accepted[-1]["target"]["reply_to_message_id"] == "1"

            # a follower reads only what is new, and keeps its place
            read = await call(client, "mark_read", session=sid, participant="follower")
            assert (read["last_read_seq"], read["unread"]) == (4, 0)
            await adapter.submit({"chat": "c1", "thread": "T1", "id": "3", "text": "and now?"})
            await wait_for(lambda: len(sink.accepted) == 4)
            delta = await call(client, "get_session_delta", session=sid, after_seq=4, limit=1)
            assert [m["seq_no"] for m in delta["messages"]] == [5] and delta["has_more"]
            back = await call(client, "mark_read", session=sid, participant="follower", seq_no=2)
            assert (back["last_read_seq"], back["unread"]) == (4, 2)  # never moves backwards

            step = await call(
                client, "update_checkpoint", session=sid, name="answer", status="in_progress"
            )
            step = await call(
                client,
                "update_checkpoint",
                session=sid,
                name="answer",
                status="done",
                detail="replied",
                seq_no=4,
            )
            assert step["checkpoint"]["status"] == "done"
            summary = await call(
                client,
                "create_session_summary",
                session=sid,
                from_seq=1,
                to_seq=4,
                content="greeting and a review",
                model="test-model",
            )
            assert summary["summary"]["to_seq"] == 4
            artifact = await call(
                client,
                "link_session_artifact",
                session=sid,
                kind="pull_request",
                name="fix",
                uri="https://example.com/pr/1",
                seq_no=4,
            )
            assert artifact["artifact"]["uri"] == "https://example.com/pr/1"

            hits = await call(client, "search_session", query="reviewer", session=key)
            assert [h["seq_no"] for h in hits["hits"]] == [4]
            everywhere = await call(client, "search_session", query="thread")
            assert {h["key"] for h in everywhere["hits"]} == {"sink:test:c1:T2"}

            # inputs are validated, and failures say what is wrong
            assert "pattern" in await fails(
                client, "append_session_message", session=sid, participant="no spaces!", content="x"
            )
            assert "greater than or equal" in await fails(
                client, "get_session_delta", session=sid, limit=0
            )
            assert "no session 999" in await fails(client, "get_session_delta", session=999)
            assert "neither a session id nor a key" in await fails(
                client, "get_session_delta", session="nonsense"
            )
            assert "after to_seq" in await fails(
                client, "create_session_summary", session=sid, from_seq=3, to_seq=2, content="x"
            )
            assert "past the session's last message" in await fails(
                client, "create_session_summary", session=sid, from_seq=1, to_seq=99, content="x"
            )
            assert "uri or content" in await fails(
                client, "link_session_artifact", session=sid, kind="doc", name="empty"
            )
            assert "in_progress" in await fails(
                client, "update_checkpoint", session=sid, name="x", status="finished"
            )

            closed = await call(client, "close_session", session=sid)
            assert closed["closed"] is True
            assert (await call(client, "close_session", session=sid))["closed"] is False
            assert "closed" in await fails(
                client, "append_session_message", session=sid, participant="late", content="x"
            )

        detail = await gw.operator.ops.session_detail(sid)
        assert [c.status for c in detail.checkpoints] == ["done"]
        # MCP participants keep their cursors; the platform user and the assistant who spoke
        # are participants too
        agents = {p.participant: p.last_read_seq for p in detail.participants if p.role == "agent"}
        assert agents == {"reviewer": 4, "follower": 4}
        assert {p.participant: p.role for p in detail.participants if p.role != "agent"} == {
            "sink:tester": "user",
            "assistant": "assistant",
        }
        assert detail.summaries[0].model == "test-model"
    assert len(sink.accepted) == 4  # nothing else was sent anywhere


async def test_mcp_over_http_with_a_token(database_url: str) -> None:
    async with running_gateway(
        database_url, GATEWAY_ADMIN_TOKEN="tok-123-0123456789abcdef-0123456789"
    ) as gw:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": "Bearer tok-123-0123456789abcdef-0123456789"}
            ) as http,
            Client(streamable_http_client(f"{gw.url}mcp", http_client=http)) as client,
        ):
            assert (await call(client, "list_sessions"))["sessions"] == []


async def test_mcp_over_stdio_appends_into_the_outbox(database_url: str, tmp_path: Path) -> None:
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        key = SessionKey(platform="web", scope="local", chat_id="general", thread_id="t1")
        target = ReplyTarget(
            platform="web",
            scope="local",
            chat_id="general",
            thread_id="t1",
            reply_to_message_id="m1",
        )
        stored = await store.inbox.ingest(
            to_inbound(
                Envelope(key=key, target=target, message_id="m1", text="hi", sender=Sender(id="u"))
            ),
            raw={"text": "hi"},
        )
    finally:
        await store.close()

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
            sessions = await call(client, "list_sessions")
            assert [s["key"] for s in sessions["sessions"]] == ["web:local:general:t1"]
            appended = await call(
                client,
                "append_session_message",
                session="web:local:general:t1",
                participant="stdio-agent",
                content="from stdio",
                deliver=True,
            )
            assert appended["seq_no"] == 2

    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow("SELECT status, target::text, content FROM deliveries")
    finally:
        await conn.close()
    assert row is not None and row["status"] == "pending" and row["content"] == "from stdio"
    assert '"thread_id": "t1"' in row["target"] and stored.session_id == 1


@pytest.mark.parametrize("participant", ["", "x" * 65, "a b", "-leading"])
async def test_participant_names_are_validated_before_anything_is_written(
    database_url: str, participant: str
) -> None:
    async with running_gateway(database_url) as gw, Client(f"{gw.url}mcp") as client:
        message = await fails(client, "mark_read", session=1, participant=participant)
        assert "participant" in message


async def test_any_replica_answers_any_request_of_a_client(database_url: str) -> None:
    """Behind a load balancer consecutive requests of one client reach different replicas;
    the endpoint keeps no per-client session, so that works without sticky routing."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "list_sessions", "arguments": {"limit": 5}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with (
        running_gateway(database_url) as one,
        running_gateway(database_url) as two,
        httpx2.AsyncClient() as http,
    ):
        first = await http.post(f"{one.url}mcp", json=init, headers=headers)
        assert first.status_code == 200 and "mcp-session-id" not in first.headers
        second = await http.post(
            f"{two.url}mcp", json=call, headers={**headers, "MCP-Protocol-Version": "2025-06-18"}
        )
        assert second.status_code == 200, second.text
        [data] = [line[6:] for line in second.text.splitlines() if line.startswith("data: ")]
        result = json.loads(data)["result"]
        assert result["structuredContent"] == {"sessions": [], "next_cursor": None}


async def test_the_first_requests_side_by_side_share_one_server_and_none_is_served_after_stop(
    database_url: str,
) -> None:
    """/mcp is made on its first request (gateway.http.mcp_endpoint): clients arriving together
    all get the whole tool list, and once the gateway stops taking MCP requests (before its
    HTTP server drains) a late one is told so, never a 500."""
    async with running_gateway(database_url) as gw:

        async def tools() -> set[str]:
            async with Client(f"{gw.url}mcp") as client:
                return {t.name for t in (await client.list_tools()).tools}

        listed = await asyncio.gather(*(tools() for _ in range(3)))
        assert listed[0] >= TOOLS and listed[0] == listed[1] == listed[2]
        await gw.operator.stop()
        async with httpx2.AsyncClient() as http:
            late = await http.post(
                f"{gw.url}mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Accept": "application/json, text/event-stream"},
            )
        assert late.status_code == 503, late.text
