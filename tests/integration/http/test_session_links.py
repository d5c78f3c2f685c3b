"""Session links written by an agent through the MCP SDK's client against a running gateway's
``/mcp`` and by the admin API, refused when their type or relation is not one the design
names, and shown by the admin API's session and by ``gateway sessions show``."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
from mcp import Client
from mcp_types import CallToolResult

from session_store.store import Store
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for
from testsupport.process import run_cli_in_process

PROBLEM = "application/problem+json"


def _text(result: CallToolResult) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def _link(client: Client, **arguments: Any) -> CallToolResult:
    return await client.call_tool("link_session", arguments)


async def test_links_written_by_mcp_and_the_admin_api_are_validated_and_shown(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with (
        running_gateway(database_url, adapters=[adapter], web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as api,
    ):
        await adapter.submit({"chat": "c1", "thread": "T1", "id": "1", "text": "hello"})
        await wait_for(lambda: len(sink.accepted) == 1)
        key = "sink:test:c1:T1"

        async with Client(f"{gw.url}mcp") as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            schema = listed["link_session"].input_schema["properties"]
            assert schema["link_type"]["enum"] == [
                *("law", "doc", "task", "collection", "issue", "report", "artifact")
            ]
            assert schema["relation"]["enum"] == [
                *("input", "evidence", "output", "related", "supersedes")
            ]

            made = await _link(
                client, session=key, link_type="law", target_ref="BGB §823", relation="input"
            )
            assert not made.is_error, _text(made)
            assert made.structured_content is not None
            link = made.structured_content["link"]
            sid = link["session_id"]
            assert (link["link_type"], link["target_ref"], link["relation"]) == (
                "law",
                "BGB §823",
                "input",
            )
            done = await _link(
                client, session=sid, link_type="report", target_ref="r/q3.pdf", relation="output"
            )
            assert not done.is_error, _text(done)

            bad_type = await _link(
                client, session=sid, link_type="wiki", target_ref="x", relation="input"
            )
            assert bad_type.is_error and "link_type" in _text(bad_type)
            bad_relation = await _link(
                client, session=sid, link_type="doc", target_ref="x", relation="cites"
            )
            assert bad_relation.is_error and "relation" in _text(bad_relation)
            empty = await _link(
                client, session=sid, link_type="doc", target_ref="", relation="input"
            )
            assert empty.is_error
            unknown = await _link(
                client, session=999_999, link_type="doc", target_ref="x", relation="input"
            )
            assert unknown.is_error and "999999" in _text(unknown)

        posted = await api.post(
            f"/api/v1/sessions/{sid}/links",
            json={"link_type": "doc", "target_ref": "kb:handbook/7", "relation": "evidence"},
        )
        assert posted.status_code == 201, posted.text
        assert posted.json()["relation"] == "evidence" and posted.json()["id"] > link["id"]
        by_key = await api.post(
            f"/api/v1/sessions/{key}/links",
            json={"link_type": "task", "target_ref": "T-12", "relation": "related"},
        )
        assert by_key.status_code == 201, by_key.text

        for body in (
            {"link_type": "wiki", "target_ref": "x", "relation": "input"},
            {"link_type": "doc", "target_ref": "x", "relation": "cites"},
            {"link_type": "doc", "target_ref": "", "relation": "input"},
            {"link_type": "doc", "relation": "input"},
        ):
            refused = await api.post(f"/api/v1/sessions/{sid}/links", json=body)
            assert refused.status_code == 422, (body, refused.text)
            assert refused.headers["content-type"].startswith(PROBLEM)
        missing = await api.post(
            "/api/v1/sessions/999999/links",
            json={"link_type": "doc", "target_ref": "x", "relation": "input"},
        )
        assert missing.status_code == 404, missing.text

        shown = (await api.get(f"/api/v1/sessions/{sid}")).raise_for_status().json()
        assert [(x["link_type"], x["target_ref"], x["relation"]) for x in shown["links"]] == [
            ("law", "BGB §823", "input"),
            ("report", "r/q3.pdf", "output"),
            ("doc", "kb:handbook/7", "evidence"),
            ("task", "T-12", "related"),
        ]

        conn = await asyncpg.connect(database_url)
        try:
            audited = await conn.fetch(
                "SELECT outcome, details->>'relation' AS relation FROM audit_events "
                "WHERE action = 'session.link.add' ORDER BY id"
            )
        finally:
            await conn.close()
        # each link written, by either surface; the refused ones never reached the store
        assert [(r["outcome"], r["relation"]) for r in audited] == [
            ("ok", "input"),
            ("ok", "output"),
            ("ok", "evidence"),
            ("ok", "related"),
        ]

    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:  # the lifecycle's attributes are shown with the links
        await store.sessions.set_attributes(sid, topic="Liability", priority=3, tags=["law"])
    finally:
        await store.close()
    code, out, err = await run_cli_in_process(
        ["sessions", "show", str(sid)], {"DATABASE_URL": database_url}
    )
    assert code == 0, err
    assert "  link: input law BGB §823" in out
    assert "  topic: Liability · priority 3 · tags law" in out
    assert "  link: evidence doc kb:handbook/7" in out
    assert out.index("link: input law") < out.index("link: related task T-12") < out.index("[1]")
