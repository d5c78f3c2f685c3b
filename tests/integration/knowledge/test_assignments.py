"""Operator knowledge bases assigned to chats: a turn searches its thread's documents, its
chat's, the bases assigned to its chat and ``default`` (everywhere, or only where assigned
with ``GATEWAY_KB_DEFAULT=assigned``), never a base assigned to another chat."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from gateway.core.domain import SessionKey
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.places import Chat, thread_kb
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import KnowledgeStore
from tests.integration.knowledge.test_answers import CitingAgent
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for
from testsupport.knowledge import SharedLocalEmbedder, drain


def test_chat_names_parse_with_a_colon_in_the_scope() -> None:
    assert Chat.parse("mattermost:chat.example.com:8065:town-square") == Chat(
        "mattermost", "chat.example.com:8065", "town-square"
    )
    assert str(Chat.parse("web:local:general")) == "web:local:general"
    key = SessionKey(platform="slack", scope="T1", chat_id="C1", thread_id="1.2")
    assert Chat.of(key) == Chat("slack", "T1", "C1")
    for bad in ("web", "web:local", "web::general", ":local:general", "web:local:"):
        with pytest.raises(ValueError, match="platform:scope:chat"):
            Chat.parse(bad)
    with pytest.raises(ValueError, match="control characters"):
        Chat.parse("web:local:gen\x00eral")


def test_a_bad_kb_default_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.core.errors import ConfigError
    from gateway.core.settings import load_settings

    with pytest.raises(ConfigError, match="GATEWAY_KB_DEFAULT"):
        load_settings(_env_file=None, GATEWAY_KB_DEFAULT="nowhere")
    assert load_settings(_env_file=None).gateway_kb_default == "everywhere"


async def _ready(ks: KnowledgeStore, doc_id: int) -> bool:
    doc = await ks.get_document(doc_id)
    return doc is not None and doc.state == "ready"


async def test_a_kb_assigned_to_chat_a_is_not_searched_in_chat_b(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with (
        running_gateway(
            database_url, adapters=[adapter], agent=CitingAgent(), web_chat=False
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        # the sink surface's chats are sink:test:<chat>
        made = await client.post(
            "/api/v1/kb/assignments", json={"kb": "runbook", "chat": "sink:test:a"}
        )
        assert made.status_code == 200, made.text
        assert made.json() == {"kb": "runbook", "chat": "sink:test:a", "created": True}
        again = await client.post(
            "/api/v1/kb/assignments", json={"kb": "runbook", "chat": "sink:test:a"}
        )
        assert again.json()["created"] is False
        bad = await client.post("/api/v1/kb/assignments", json={"kb": "runbook", "chat": "a:b"})
        assert bad.status_code == 422
        for body in (
            {"kb": "a\u0000b", "chat": "sink:test:a"},
            {"kb": "runbook", "chat": "sink:test:\u0000"},
            {"kb": "\ud800", "chat": "sink:test:a"},
        ):
            raw = json.dumps(body).encode()  # a lone surrogate as JSON escapes it
            refused = await client.post(
                "/api/v1/kb/assignments",
                content=raw,
                headers={"Content-Type": "application/json"},
            )
            assert refused.status_code == 422, (body, refused.text)
        extra = await client.post(
            "/api/v1/kb/assignments", json={"kb": "x", "chat": "sink:test:a", "more": 1}
        )
        assert extra.status_code == 422
        added = await gw.knowledge.add(
            "runbook.md", b"# Deploys\n\nThe deploy window opens Tuesday at 14:00.", kb="runbook"
        )
        await wait_for(lambda: _ready(gw.knowledge.store, added.document.id), timeout=20)
        listed = (await client.get("/api/v1/kb/assignments")).json()
        assert [(a["kb_name"], a["platform"], a["scope"], a["chat_id"]) for a in listed] == [
            ("runbook", "sink", "test", "a")
        ]

        question = "when does the deploy window open?"
        await adapter.submit({"chat": "a", "thread": "t", "id": "1", "text": question})
        await adapter.submit({"chat": "b", "thread": "t", "id": "2", "text": question})
        await wait_for(lambda: sink.texts_in("a", "t") and sink.texts_in("b", "t"), timeout=20)
        assert "Tuesday at 14:00" in sink.texts_in("a", "t")[0]
        assert "[1] runbook.md" in sink.texts_in("a", "t")[0]
        assert all("14:00" not in text for text in sink.texts_in("b", "t"))

        # unassigned: chat a no longer searches it either
        gone = await client.delete(
            "/api/v1/kb/assignments", params={"kb": "runbook", "chat": "sink:test:a"}
        )
        assert gone.status_code == 204
        missing = await client.delete(
            "/api/v1/kb/assignments", params={"kb": "runbook", "chat": "sink:test:a"}
        )
        assert missing.status_code == 404
        await adapter.submit({"chat": "a", "thread": "u", "id": "3", "text": question})
        await wait_for(lambda: sink.texts_in("a", "u"), timeout=20)
        assert all("14:00" not in text for text in sink.texts_in("a", "u"))


async def test_default_applies_everywhere_unless_it_must_be_assigned(
    kstore: KnowledgeStore,
) -> None:
    here = SessionKey(platform="p", scope="s", chat_id="here", thread_id="t")
    there = SessionKey(platform="p", scope="s", chat_id="there", thread_id="t")

    def knowledge(*, everywhere: bool) -> Knowledge:
        return Knowledge(
            kstore, SharedLocalEmbedder(), KnowledgeSettings(default_everywhere=everywhere)
        )

    k = knowledge(everywhere=True)
    await k.add("faq.md", b"# FAQ\n\nThe cafeteria serves soup on Fridays.")
    await k.add("notes.md", b"# Notes\n\nThe printer code is 2468.", kb=thread_kb(here))
    await drain(k)
    assert [b.name for b in await k.catalog.scope(here)] == ["default", thread_kb(here)]
    assert "soup" in (await k.retrieval.search_in(there, "what soup on fridays?")).hits[0].content
    elsewhere = (await k.retrieval.search_in(there, "printer code")).hits
    assert all("2468" not in h.content for h in elsewhere)

    strict = knowledge(everywhere=False)
    assert [b.name for b in await strict.catalog.scope(here)] == [thread_kb(here)]
    assert not (await strict.retrieval.search_in(there, "what soup on fridays?")).hits
    assert await strict.catalog.assign("default", Chat.of(there)) is True
    assert [b.name for b in await strict.catalog.scope(there)] == ["default"]
    assert "soup" in (await strict.retrieval.search_in(there, "soup on fridays")).hits[0].content
    assert [b.name for b in await strict.catalog.scope(here)] == [thread_kb(here)]
    assert await strict.catalog.unassign("default", Chat.of(there)) is True
    assert await strict.catalog.unassign("default", Chat.of(there)) is False
    assert await strict.catalog.scope(there) == []
    await k.aclose()
    await strict.aclose()


async def test_mcp_tools_assign_list_and_unassign(database_url: str) -> None:
    from mcp import Client

    async with (
        running_gateway(database_url, web_chat=False) as gw,
        Client(f"{gw.url}mcp") as client,
    ):

        async def call(tool: str, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
            assert result.structured_content is not None
            return dict(result.structured_content)

        made = await call("kb_assign", kb="handbook", chat="slack:T1:C1")
        assert made == {"kb": "handbook", "chat": "slack:T1:C1", "assigned": True, "new": True}
        assert (await call("kb_assignments"))["assignments"] == [
            {"kb": "handbook", "chat": "slack:T1:C1"}
        ]
        assert (await call("kb_unassign", kb="handbook", chat="slack:T1:C1"))["assigned"] is False
        assert (await call("kb_assignments", kb="handbook"))["assignments"] == []
        assert (
            await client.call_tool("kb_unassign", {"kb": "handbook", "chat": "slack:T1:C1"})
        ).is_error
        assert (
            await client.call_tool("kb_assign", {"kb": "handbook", "chat": "nonsense"})
        ).is_error
