"""Clickable citations: an answer's ``[n]`` links through to the passage frozen with it, read
from an endpoint guarded like the conversation: the web chat's for whoever may read that
thread (never another person's), the admin API's behind the admin token."""

from __future__ import annotations

from typing import Any

import httpx

from tests.knowledge.documents import make_pdf
from tests.knowledge.test_answers import PAGES, CitingAgent
from tests.support import running_gateway, wait_for

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
        session = (await gw.store.list_sessions(platform="web"))[0]
        message = next(
            m for m in await gw.store.delta(session.id, 0) if m.seq_no == reply["seq_no"]
        )
        ops = (await client.get(f"/api/v1/kb/citations/{message.id}")).json()
        assert [(x["ordinal"], x["document_name"], x["page"]) for x in ops] == [
            (1, "handbook.pdf", 3)
        ]


async def test_the_pages_link_citations() -> None:
    """The web chat and /ops scripts turn the cited [n] into links to the passage."""
    from importlib import resources

    app = resources.files("adapters.web").joinpath("static/app.js").read_text(encoding="utf-8")
    ops = resources.files("gateway.ui").joinpath("static/ops.js").read_text(encoding="utf-8")
    assert "/citations`" in app and "function linkCitations" in app
    assert '"/api/v1/kb/citations/"' in ops and "function linkCitations" in ops
