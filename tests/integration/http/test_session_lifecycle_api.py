"""The session lifecycle, topic/priority/tags and decisions through the MCP tools (the SDK's
own client over streamable HTTP) and the admin API, against a running gateway with the sink
surface: /decision typed in the thread, kind=decision appended by an agent, pause, resume and
archive (and the refused steps), the filters."""

from __future__ import annotations

from typing import Any

import httpx
from mcp import Client

from gateway.turns.stages.commands import PAUSE_TEXT
from tests.integration.http.test_mcp import call, fails
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


async def test_lifecycle_and_decisions_over_mcp_and_the_admin_api(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    key = "sink:test:c1:T1"
    async with (
        running_gateway(database_url, adapters=[adapter], web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as api,
        Client(f"{gw.url}mcp") as client,
    ):
        await adapter.submit({"chat": "c1", "thread": "T1", "id": "1", "text": "hello"})
        await adapter.submit(
            {"chat": "c1", "thread": "T1", "id": "2", "text": "/decision ship on Monday"}
        )
        await adapter.submit({"chat": "c1", "thread": "T2", "id": "3", "text": "other"})
        await wait_for(lambda: len(sink.accepted) == 3)
        assert "Decision recorded: ship on Monday" in sink.texts_in("c1", "T1")

        # an agent marks a decision; both are read back (with the unresolved checkpoints)
        appended = await call(
            client,
            "append_session_message",
            session=key,
            participant="planner",
            content="Postgres it is",
            kind="decision",
            importance=5,
        )
        assert appended["kind"] == "decision" and appended["importance"] == 5
        await call(client, "update_checkpoint", session=key, name="review", status="blocked")
        await call(client, "update_checkpoint", session=key, name="draft", status="done")
        got = await call(client, "get_session_decisions", session=key)
        assert [d["text"] for d in got["decisions"]] == ["ship on Monday", "Postgres it is"]
        assert [c["name"] for c in got["open_checkpoints"]] == ["review"]
        response = await api.get(f"/api/v1/sessions/{key}/decisions")
        assert response.status_code == 200, response.text
        body = response.json()
        assert [d["kind"] for d in body["decisions"]] == ["decision", "decision"]
        assert [c["name"] for c in body["open_checkpoints"]] == ["review"]
        # the bot's answers are answers
        delta = await call(client, "get_session_delta", session=key, after_seq=0)
        kinds = {(m["role"], m.get("kind", "chat")) for m in delta["messages"]}
        # the agent's decision was appended as an assistant message
        assert kinds == {
            ("user", "chat"),
            ("user", "decision"),
            ("assistant", "answer"),
            ("assistant", "decision"),
        }

        # topic, priority, tags; the filters
        updated = await call(
            client, "update_session", session=key, topic="Launch", priority=3, tags=["q1", "ops"]
        )
        assert (updated["topic"], updated["priority"], updated["tags"]) == (
            "Launch",
            3,
            ["ops", "q1"],
        )
        response = await api.patch(
            "/api/v1/sessions/sink:test:c1:T2", json={"topic": "Lunch", "tags": ["q1"]}
        )
        assert response.status_code == 200 and response.json()["tags"] == ["q1"]
        listed = await call(client, "list_sessions", tags=["q1"])
        assert {s["key"] for s in listed["sessions"]} == {key, "sink:test:c1:T2"}
        listed = await call(client, "list_sessions", tags=["q1", "ops"], min_priority=1)
        assert [s["key"] for s in listed["sessions"]] == [key]
        response = await api.get("/api/v1/sessions", params={"topic": "lunch"})
        assert [s["key"]["thread_id"] for s in response.json()["items"]] == ["T2"]
        response = await api.get("/api/v1/sessions", params=[("tag", "q1"), ("tag", "ops")])
        assert [s["key"]["thread_id"] for s in response.json()["items"]] == ["T1"]
        response = await api.get("/api/v1/sessions", params={"tag": "has space"})
        assert response.status_code == 422

        # pause: stored, not answered; refused steps say why; resume answers what waited
        assert "archive needs it closed" in await fails(client, "archive_session", session=key)
        assert (await call(client, "pause_session", session=key))["status"] == "paused"
        refused = await fails(client, "pause_session", session=key)
        assert "is paused; pause needs it active" in refused
        await adapter.submit({"chat": "c1", "thread": "T1", "id": "4", "text": "while paused"})

        async def stored() -> bool:
            delta = await call(client, "get_session_delta", session=key, after_seq=0)
            return delta["messages"][-1]["content"] == "while paused"

        await wait_for(stored)
        listed = await call(client, "list_sessions", status="paused")
        assert [s["key"] for s in listed["sessions"]] == [key]
        answered = len(sink.accepted)
        response = await api.post(f"/api/v1/sessions/{key}/resume")
        assert response.status_code == 200 and response.json()["status"] == "active"
        await wait_for(lambda: len(sink.accepted) == answered + 1)
        assert sink.texts_in("c1", "T1")[-1] == "echo: while paused"

        # archive: only a closed session; afterwards read-only, and its key opens a new one
        response = await api.post(f"/api/v1/sessions/{key}/archive")
        assert response.status_code == 409 and "archive needs it closed" in response.text
        await call(client, "close_session", session=key)
        sid = updated["id"]
        response = await api.post(f"/api/v1/sessions/{sid}/archive")
        assert response.status_code == 200 and response.json()["status"] == "archived"
        response = await api.patch(f"/api/v1/sessions/{sid}", json={"priority": 1})
        assert response.status_code == 409
        assert "archived" in await fails(
            client, "append_session_message", session=str(sid), participant="p", content="x"
        )
        response = await api.post("/api/v1/sessions/999999/pause")
        assert response.status_code == 404

        # /pause typed in a thread is listed by /help
        await adapter.submit({"chat": "c1", "thread": "T2", "id": "5", "text": "/help"})
        await wait_for(lambda: any(t.startswith("I answer") for t in sink.texts_in("c1", "T2")))
        await adapter.submit({"chat": "c1", "thread": "T2", "id": "6", "text": "/pause"})
        await wait_for(lambda: PAUSE_TEXT in sink.texts_in("c1", "T2"))
        help_text: Any = next(t for t in sink.texts_in("c1", "T2") if t.startswith("I answer"))
        assert "/pause - " in help_text and "/decision - " in help_text
