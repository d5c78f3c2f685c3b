"""Clickable citations: an answer's ``[n]`` links through to the passage frozen with it, read
from an endpoint guarded like the conversation: the web chat's for whoever may read that
thread (never another person's), the admin API's behind the admin token."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.async_api import Browser, expect

from tests.integration.http.test_browser import _record_errors, browser  # noqa: F401 (the fixture)
from tests.integration.knowledge.test_answers import PAGES, CitingAgent
from testsupport.documents import make_pdf
from testsupport.harness import running_gateway, wait_for

ANN = {"X-Auth-Request-User": "ann"}
BOB = {"X-Auth-Request-User": "bob"}


async def test_a_citation_links_to_its_frozen_passage_for_its_reader_only(
    database_url: str,
) -> None:
    async with (
        running_gateway(
            database_url,
            agent=CitingAgent(),
            GATEWAY_WEB_AUTH="proxy",
            GATEWAY_TRUSTED_PROXIES="127.0.0.0/8",
            GATEWAY_WEB_AUTH_HEADER="X-Auth-Request-User",
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        added = await gw.knowledge.add("handbook.pdf", make_pdf(PAGES))

        async def ready() -> bool:
            doc = await gw.knowledge.store.get_document(added.document.id)
            return doc is not None and doc.state == "ready"

        await wait_for(ready, timeout=20)
        sent = await client.post(
            "/web/api/channels/~ann/messages",
            json={"text": "How long do customers get refunds?", "client_msg_id": "q1"},
            headers=ANN,
        )
        assert sent.status_code == 200, sent.text
        base = f"/web/api/channels/~ann/threads/{sent.json()['thread_id']}"

        async def answer() -> dict[str, Any] | None:
            r = await client.get(f"{base}/messages", headers=ANN)
            found = [m for m in r.json()["messages"] if m["role"] == "assistant"]
            return found[0] if found else None

        reply = await wait_for(answer, timeout=20)
        assert reply is not None
        assert reply["citations"] == [1]
        assert "[1] handbook.pdf, p. 3" in str(reply["content"])
        url = f"{base}/messages/{reply['seq_no']}/citations"
        cited = await client.get(url, headers=ANN)
        assert cited.status_code == 200, cited.text
        [c] = cited.json()["citations"]
        assert (c["n"], c["document"], c["page"]) == (1, "handbook.pdf", 3)
        assert "refunds within thirty days" in c["passage"]

        # read counts: the passage the answer cited (not every passage it was offered), and
        # one more for each opening of its link (an unknown [n] counts nothing)
        async def accessed() -> int:
            await gw.knowledge.turns.flush_access()
            doc = await gw.knowledge.store.get_document(added.document.id)
            assert doc is not None
            return doc.access_count

        assert await accessed() == 1
        assert (await client.get(f"{url}?n=1", headers=ANN)).json() == cited.json()
        assert (await client.get(f"{url}?n=7", headers=ANN)).status_code == 200
        assert await accessed() == 2

        # frozen: deleting the document changes nothing
        assert await gw.knowledge.store.remove_document(added.document.id)
        assert (await client.get(url, headers=ANN)).json() == cited.json()

        # a question is no answer: it cites nothing; a message that is not there is a 404
        assert (await client.get(f"{base}/messages/1/citations", headers=ANN)).json()[
            "citations"
        ] == []
        assert (await client.get(f"{base}/messages/99/citations", headers=ANN)).status_code == 404
        # nobody else reads ann's thread: not bob, not through another channel, not anonymous
        assert (await client.get(url, headers=BOB)).status_code == 404
        other = url.replace("/channels/~ann/", "/channels/general/")
        assert (await client.get(other, headers=ANN)).status_code == 404
        assert (await client.get(other, headers=BOB)).status_code == 404
        assert (await client.get(url)).status_code == 401

        # /ops reads the same frozen rows through the admin API (loopback, no token set)
        session = (await gw.store.sessions.list_sessions(platform="web"))[0]
        message = next(
            m for m in await gw.store.sessions.delta(session.id, 0) if m.seq_no == reply["seq_no"]
        )
        ops = (await client.get(f"/api/v1/kb/citations/{message.id}")).json()
        assert [(x["ordinal"], x["document_name"], x["page"]) for x in ops] == [
            (1, "handbook.pdf", 3)
        ]


async def test_clicking_a_citation_shows_the_passage_in_the_web_chat_and_ops(
    database_url: str,
    browser: Browser,  # noqa: F811
) -> None:
    async with running_gateway(database_url, agent=CitingAgent()) as gw:
        added = await gw.knowledge.add("handbook.pdf", make_pdf(PAGES))

        async def ready() -> bool:
            doc = await gw.knowledge.store.get_document(added.document.id)
            return doc is not None and doc.state == "ready"

        await wait_for(ready, timeout=20)
        page = await browser.new_page()
        errors: list[str] = []
        _record_errors(page, errors)
        await page.goto(gw.url)
        await page.fill("#text", "How long do customers get refunds?")
        await page.press("#text", "Enter")
        cite = page.locator(".msg.assistant button.cite", has_text="[1]").first
        await cite.click()
        panel = page.locator(".msg.assistant .citation")
        await expect(panel).to_contain_text("[1] handbook.pdf, p. 3")
        await expect(panel.locator("blockquote")).to_contain_text("refunds within thirty days")
        await cite.click()  # the same [n] again closes it
        await expect(panel).to_have_count(0)

        session = (await gw.store.sessions.list_sessions(platform="web"))[0]
        await page.goto(f"{gw.url}ops/sessions/{session.id}")
        link = page.locator("#transcript .msg.assistant a.cite", has_text="[1]").first
        await link.click()
        ops_panel = page.locator("#transcript .msg.assistant .citation")
        await expect(ops_panel).to_contain_text("handbook.pdf, p. 3")
        await expect(ops_panel.locator("blockquote")).to_contain_text("thirty days")
        assert errors == []
