"""The admin API against a running gateway: finding sessions, reading transcripts with each
reply's delivery, searching, the outbox and its retry, dead letters, and problem documents for
every kind of bad input."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

PROBLEM = "application/problem+json"


async def _all_pages(client: httpx.AsyncClient, path: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(50):
        query = {**params, **({"cursor": cursor} if cursor else {})}
        body = (await client.get(path, params=query)).raise_for_status().json()
        items.extend(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("pagination did not end")


async def test_sessions_are_found_by_filters_and_paged_with_a_cursor(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with (
        running_gateway(database_url, adapters=[adapter], web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        titles = {
            ("c1", "A"): "deploy plan",
            ("c1", "B"): "100% sure",
            ("c2", "A"): "lunch order",
            ("c2", "B"): "deploy rollback",
            ("c3", None): "hello",
            ("c3", "X"): "weekly notes",
            ("c3", "Y"): "under_score",
        }
        for n, ((chat, thread), text) in enumerate(titles.items()):
            await adapter.submit({"chat": chat, "thread": thread, "id": str(n), "text": text})
        await wait_for(lambda: len(sink.accepted) == len(titles))
        await adapter.submit({"chat": "c3", "thread": "X", "id": "new", "text": "/new"})
        await wait_for(lambda: len(sink.accepted) == len(titles) + 1)

        pages = await _all_pages(client, "/api/v1/sessions", limit=3)
        assert len(pages) == len(titles) and len({s["id"] for s in pages}) == len(titles)
        stamps = [(s["last_message_at"], s["id"]) for s in pages]
        assert stamps == sorted(stamps, reverse=True)  # newest activity first, no gaps

        def keys(items: list[dict[str, Any]]) -> set[tuple[str, str | None]]:
            return {(s["key"]["chat_id"], s["key"]["thread_id"]) for s in items}

        got = await _all_pages(client, "/api/v1/sessions", chat="c2", platform="sink", limit=1)
        assert keys(got) == {("c2", "A"), ("c2", "B")}
        got = await _all_pages(client, "/api/v1/sessions", q="DEPLOY")
        assert keys(got) == {("c1", "A"), ("c2", "B")}
        got = await _all_pages(client, "/api/v1/sessions", q="%")  # a literal, not a wildcard
        assert keys(got) == {("c1", "B")}
        got = await _all_pages(client, "/api/v1/sessions", q="_")
        assert keys(got) == {("c3", "Y")}
        got = await _all_pages(client, "/api/v1/sessions", status="closed")
        assert keys(got) == {("c3", "X")}
        got = await _all_pages(client, "/api/v1/sessions", chat="c3", thread="Y")
        assert keys(got) == {("c3", "Y")}
        assert await _all_pages(client, "/api/v1/sessions", platform="telegram") == []

        by_key = (await client.get("/api/v1/sessions/sink:test:c3:-")).json()
        assert by_key["session"]["title"] == "hello"
        assert by_key["session"]["key"]["thread_id"] is None


async def test_a_session_with_its_parts_its_transcript_cursors_and_search(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    words = ["alpha", "beta", "gamma ray", "delta", "epsilon", "zeta"]
    async with (
        running_gateway(database_url, adapters=[adapter], web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        for n, word in enumerate(words):
            out = await adapter.submit({"chat": "c", "thread": "T", "id": str(n), "text": word})
            await wait_for(lambda: len(sink.accepted) == n + 1)  # noqa: B023 - awaited at once
        other = await adapter.submit({"chat": "c", "thread": "U", "id": "u", "text": "gamma too"})
        await wait_for(lambda: len(sink.accepted) == len(words) + 1)
        sid = out.session_id
        assert sid is not None and other.session_id is not None

        ops = gw.operator.ops
        await ops.mark_read(sid, "reviewer", seq_no=4)
        await ops.update_checkpoint(sid, name="triage", status="done", detail="looked at it")
        await ops.create_summary(sid, from_seq=1, to_seq=6, content="greek letters")
        await ops.add_artifact(sid, kind="doc", name="notes", uri="https://example.com/n")
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(
                "INSERT INTO session_links (session_id, linked_session_id, relation) "
                "VALUES ($1, $2, 'related')",
                sid,
                other.session_id,
            )
        finally:
            await conn.close()

        detail = (await client.get(f"/api/v1/sessions/{sid}")).json()
        assert detail["session"]["message_count"] == 12
        # the MCP participant, plus the people and the assistant who spoke
        agents = [p for p in detail["participants"] if p["role"] == "agent"]
        assert [p["participant"] for p in agents] == ["reviewer"]
        assert agents[0]["last_read_seq"] == 4
        assert {p["role"] for p in detail["participants"]} == {"agent", "user", "assistant"}
        [checkpoint] = detail["checkpoints"]
        assert (checkpoint["name"], checkpoint["status"]) == ("triage", "done")
        assert detail["summaries"][0]["content"] == "greek letters"
        assert detail["artifacts"][0]["uri"] == "https://example.com/n"
        assert detail["links"][0]["linked_session_id"] == other.session_id
        assert detail["deliveries"] == {"sent": 6}

        first = (await client.get(f"/api/v1/sessions/{sid}/messages?limit=5")).json()
        assert [m["seq_no"] for m in first["items"]] == [1, 2, 3, 4, 5]
        assert first["next_after_seq"] == 5 and first["has_more_after"]
        assert first["prev_before_seq"] is None
        rest = (await client.get(f"/api/v1/sessions/{sid}/messages?after_seq=10&limit=5")).json()
        assert [m["seq_no"] for m in rest["items"]] == [11, 12] and not rest["has_more_after"]
        back = (await client.get(f"/api/v1/sessions/{sid}/messages?before_seq=5&limit=2")).json()
        assert [m["seq_no"] for m in back["items"]] == [3, 4] and back["prev_before_seq"] == 3
        # both: the newest of those between them
        url = f"/api/v1/sessions/{sid}/messages?after_seq=1&before_seq=5&limit=2"
        between = (await client.get(url)).json()
        assert [m["seq_no"] for m in between["items"]] == [3, 4]
        url = f"/api/v1/sessions/{sid}/messages?after_seq=2&before_seq=4"
        assert [m["seq_no"] for m in (await client.get(url)).json()["items"]] == [3]

        reply = first["items"][1]
        assert reply["role"] == "assistant" and reply["model"] == "echo"
        [delivery] = reply["deliveries"]
        assert delivery["status"] == "sent" and delivery["platform_message_id"]
        assert delivery["target"]["chat_id"] == "c" and delivery["target"]["thread_id"] == "T"
        assert delivery["target"]["reply_to_message_id"] == "0"
        assert first["items"][0]["reply_target"]["thread_id"] == "T"
        assert first["items"][0]["deliveries"] == []

        inside = (await client.get(f"/api/v1/sessions/{sid}/search", params={"q": "gamma"})).json()
        assert [h["seq_no"] for h in inside["items"]] == [6, 5]  # newest first
        assert "«gamma»" in inside["items"][1]["snippet"]
        phrase = await client.get(f"/api/v1/sessions/{sid}/search", params={"q": '"gamma ray"'})
        assert [h["seq_no"] for h in phrase.json()["items"]] == [6, 5]

        everywhere = await _all_pages(client, "/api/v1/search", q="gamma", limit=1)
        assert {h["session_id"] for h in everywhere} == {sid, other.session_id}
        assert len(everywhere) == 4  # two messages in each session
        assert {h["session_key"]["thread_id"] for h in everywhere} == {"T", "U"}


async def test_a_failed_delivery_shows_its_target_and_error_and_a_retry_sends_it(
    database_url: str, sink: SinkServer
) -> None:
    sink.script.append(("400", "Bad Request: chat not found"))
    adapter = SinkAdapter(sink.url)
    async with (
        running_gateway(database_url, adapters=[adapter], web_chat=False) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        await adapter.submit({"chat": "c9", "thread": "T1", "id": "1", "text": "ping"})

        async def failed() -> list[dict[str, Any]]:
            body = (await client.get("/api/v1/deliveries", params={"status": "failed"})).json()
            return list(body["items"])

        [row] = await wait_for(failed)
        assert row["last_error"] == "Bad Request: chat not found"
        assert (row["target"]["chat_id"], row["target"]["thread_id"]) == ("c9", "T1")
        assert row["content"] == "echo: ping" and sink.accepted == []
        one = (await client.get(f"/api/v1/deliveries/{row['id']}")).json()
        assert one == row

        retried = await client.post(f"/api/v1/deliveries/{row['id']}/retry")
        assert retried.status_code == 200, retried.text
        assert retried.json()["status"] in ("pending", "sending", "sent")
        await wait_for(lambda: sink.texts_in("c9", "T1") == ["echo: ping"])

        async def sent() -> bool:
            body = (await client.get(f"/api/v1/deliveries/{row['id']}")).json()
            return bool(body["status"] == "sent")

        await wait_for(sent)
        again = await client.post(f"/api/v1/deliveries/{row['id']}/retry")
        assert again.status_code == 409 and again.headers["content-type"] == PROBLEM
        assert "only failed deliveries" in again.json()["detail"]
        listed = (await client.get("/api/v1/deliveries", params={"status": "sent"})).json()
        assert [d["id"] for d in listed["items"]] == [row["id"]]
    assert sink.texts_in("c9", "T1") == ["echo: ping"]  # once, in its own thread


async def test_rejected_inbound_events_are_listed_with_reason_and_raw_payload(
    database_url: str,
) -> None:
    async with (
        running_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        bad = await client.post("/web/api/channels/general/messages", json={"text": ""})
        assert bad.status_code == 422
        junk = await client.post(
            "/web/api/channels/general/messages",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        assert junk.status_code == 400

        newest = (await client.get("/api/v1/inbound-events", params={"limit": 1})).json()
        assert newest["items"][0]["reason"] == "body is not a JSON object"
        # lists leave raw payloads out; one event has it
        assert newest["items"][0]["payload"] is None
        one = await client.get(f"/api/v1/inbound-events/{newest['items'][0]['id']}")
        assert one.json()["payload"] == {"body": "{not json"}
        assert (await client.get("/api/v1/inbound-events/999999")).status_code == 404
        older = (
            await client.get(
                "/api/v1/inbound-events", params={"limit": 1, "cursor": newest["next_cursor"]}
            )
        ).json()
        assert older["items"][0]["reason"] == "text must be a non-empty string"
        older_one = await client.get(f"/api/v1/inbound-events/{older['items'][0]['id']}")
        assert older_one.json()["payload"] == {"text": ""}
        assert older["items"][0]["platform"] == "web"
        ignored = await client.get("/api/v1/inbound-events", params={"status": "ignored"})
        assert ignored.json()["items"] == []
        stats = (await client.get("/api/v1/stats")).json()
        assert stats["inbound"]["rejected"] == 2


async def test_bad_input_is_a_problem_document_never_a_500(database_url: str) -> None:
    cases: list[tuple[str, str, int]] = [
        # not the declared shape of a position: refused by the schema (422, as any bad
        # parameter); every value of the shape is a position (below)
        ("GET", "/api/v1/sessions?cursor=zzz", 422),
        ("GET", "/api/v1/sessions?cursor=%25%25%25", 422),
        ("GET", "/api/v1/sessions?cursor=5", 422),
        ("GET", "/api/v1/sessions?cursor=1_-5", 422),
        ("GET", "/api/v1/sessions?cursor=2026-01-01T00:00_5", 422),
        ("GET", "/api/v1/deliveries?cursor=-1", 422),
        ("GET", "/api/v1/deliveries?cursor=99999999999999999999", 422),
        ("GET", "/api/v1/deliveries?cursor=5_5", 422),
        ("GET", "/api/v1/audit?cursor=_5", 422),
        ("GET", "/api/v1/sessions?limit=0", 422),
        ("GET", "/api/v1/sessions?limit=100000", 422),
        ("GET", "/api/v1/sessions?status=sleeping", 422),
        ("GET", "/api/v1/sessions/0", 404),
        ("GET", "/api/v1/sessions/123456", 404),
        ("GET", "/api/v1/sessions/9999999999999999999", 404),
        # longer than any id (19 digits) and not a key: not a session reference
        ("GET", "/api/v1/sessions/99999999999999999999999999", 422),
        # a Unicode digit passes str.isdigit() but not int(): a key, not an id
        ("GET", "/api/v1/sessions/%C2%B2/messages", 422),
        ("GET", "/api/v1/sessions/not-a-session", 422),
        # a key in the path holds no % (one sent unencoded would decode as something else)
        ("GET", "/api/v1/sessions/web:local:a%25b:-", 422),
        ("GET", "/api/v1/sessions/web:local:nochat:-", 404),
        ("GET", "/api/v1/sessions/123456/messages", 404),
        ("GET", "/api/v1/sessions/1/messages?after_seq=-1", 422),
        ("GET", "/api/v1/sessions/1/messages?before_seq=99999999999999999999", 422),
        ("GET", "/api/v1/sessions/123456/search?q=x", 404),
        ("GET", "/api/v1/search?q=%21%21%21", 422),
        # one value, given twice: refused, not read as the last one
        ("GET", "/api/v1/sessions?min_priority=x&min_priority=0", 422),
        ("GET", "/api/v1/sessions?platform=a&platform=b", 422),
        ("GET", "/api/v1/search", 422),
        ("GET", "/api/v1/deliveries/abc", 422),
        ("GET", "/api/v1/deliveries/0", 422),
        ("GET", "/api/v1/deliveries/424242", 404),
        ("POST", "/api/v1/deliveries/424242/retry", 404),
        ("GET", "/api/v1/deliveries?status=lost", 422),
        ("GET", "/api/v1/inbound-events?status=accepted", 422),
        ("GET", "/api/v1/no-such-thing", 404),
        ("DELETE", "/api/v1/sessions", 405),
    ]
    async with (
        running_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        await client.post(
            "/web/api/channels/general/messages", json={"text": "hi", "client_msg_id": "m1"}
        )
        for method, path, status in cases:
            response = await client.request(method, path)
            where = f"{method} {path}: {response.text}"
            assert response.status_code == status, where
            assert response.headers["content-type"] == PROBLEM, where
            body = response.json()
            assert body["status"] == status and body["title"] and body["detail"], where
            assert body["type"].startswith("urn:chat-gateway:problem:"), where
        # any position of the declared shape is a page, however far out (clamped to what a
        # row can have): a schema-valid cursor is never refused
        for path in (
            "/api/v1/sessions?cursor=_0",
            "/api/v1/sessions?cursor=_9999999999999999999",
            "/api/v1/sessions?cursor=999999999999999999_1",
            "/api/v1/sessions?cursor=-999999999999999999_1",
            "/api/v1/deliveries?cursor=0",
            "/api/v1/deliveries?cursor=9999999999999999999",
            "/api/v1/inbound-events?cursor=1",
            "/api/v1/search?q=hi&cursor=9999999999999999999",
            # a list repeats; a search finds any character past ASCII
            "/api/v1/sessions?tag=a&tag=b",
            "/api/v1/search?q=%C3%A9t%C3%A9",
            "/api/v1/search?q=%E6%97%A5%E6%9C%AC",
            "/api/v1/audit?cursor=-999999999999999999_0",
        ):
            answer = await client.get(path)
            assert answer.status_code == 200, f"{path}: {answer.text}"
        newest = (await client.get("/api/v1/sessions?cursor=_9999999999999999999")).json()
        assert newest["items"] == []  # after every session with activity, and none without
        everything = (await client.get("/api/v1/sessions?cursor=999999999999999999_1")).json()
        assert len(everything["items"]) == 1  # before the end of time: the one session
        # other paths keep their own error shapes
        assert (await client.get("/no-such-page")).status_code == 404
        assert (await client.get("/no-such-page")).headers["content-type"] != PROBLEM


async def test_openapi_documents_the_admin_routes_and_the_bearer_scheme(
    database_url: str,
) -> None:
    async with (
        running_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        spec = (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    for path in (
        "/api/v1/sessions",
        "/api/v1/sessions/{session}",
        "/api/v1/sessions/{session}/messages",
        "/api/v1/sessions/{session}/search",
        "/api/v1/search",
        "/api/v1/deliveries",
        "/api/v1/deliveries/{delivery_id}",
        "/api/v1/deliveries/{delivery_id}/retry",
        "/api/v1/inbound-events",
        "/api/v1/stats",
    ):
        assert path in paths, path
    assert "post" in paths["/api/v1/deliveries/{delivery_id}/retry"]
    params = {p["name"] for p in paths["/api/v1/sessions/{session}/messages"]["get"]["parameters"]}
    assert {"after_seq", "before_seq", "limit"} <= params
    schemes = spec["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    assert "DeliveryRecord" in spec["components"]["schemas"]
    assert not any(p.startswith("/web/") for p in paths)
