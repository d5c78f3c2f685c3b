"""Answers with sources, end to end: a question gets an answer whose sources name the right
document and page; the citations are frozen with the answer (rows and message metadata) and
survive the document's deletion; the retrieval trace and access counters are kept."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.agents.base import Turn
from gateway.core.domain import Reply, SessionKey
from gateway.knowledge.places import chat_kb, thread_kb
from session_store.repos.knowledge import KnowledgeStore
from session_store.repos.operator import OperatorStore
from testsupport.documents import make_docx, make_pdf
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


class CitingAgent:
    """Answers from the passage the gateway numbered [1] in the system prompt, citing it."""

    name = "citing"

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.turns.append(turn)
        found = re.search(r"^\[1\] .*\n(.+)$", turn.system_prompt, re.MULTILINE)
        if found is None:
            return [Reply(text="I found nothing on that.", model="citing")]
        return [Reply(text=f"{found.group(1)} [1]", model="citing")]


PAGES = [
    "Company handbook. Welcome aboard.",
    "Expenses. Travel must be booked through the portal.",
    "Refunds. Customers get refunds within thirty days of purchase.",
]


async def _ready(ks: KnowledgeStore, doc_id: int) -> bool:
    doc = await ks.get_document(doc_id)
    return doc is not None and doc.state == "ready"


async def test_an_answer_cites_the_right_document_and_page_and_keeps_it(
    database_url: str, sink: SinkServer
) -> None:
    agent = CitingAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False) as gw:
        k = gw.knowledge
        added = await k.add("handbook.pdf", make_pdf(PAGES))
        travel = await k.add(
            "travel.docx", make_docx([("h1", "Travel"), ("p", "Economy class on short trips.")])
        )
        await wait_for(lambda: _ready(k.store, added.document.id), timeout=20)

        await adapter.submit(
            {"chat": "c", "thread": "t", "id": "1", "text": "How long do customers get refunds?"}
        )
        await wait_for(lambda: sink.texts_in("c", "t"), timeout=20)
        answer = sink.texts_in("c", "t")[0]
        assert answer.startswith("Refunds. Customers get refunds within thirty days")
        assert answer.endswith("[1]\n\nSources:\n[1] handbook.pdf, p. 3")

        session = (await gw.store.sessions.list_sessions())[0]
        reply = next(
            m for m in await gw.store.sessions.delta(session.id, 0) if m.role == "assistant"
        )
        trace = reply.metadata["retrieval_trace"]
        assert trace["query"] == "How long do customers get refunds?"
        assert trace["mode"] == "hybrid"
        assert trace["candidates"][0]["document"] == "handbook.pdf"
        assert trace["candidates"][0]["page"] == 3
        assert {"lexical_rank", "vector_rank", "score"} <= set(trace["candidates"][0])
        assert trace["chosen"][0] == trace["candidates"][0]["chunk_id"]
        assert trace["timings_ms"]["total_ms"] > 0
        cited = await k.store.citations(reply.id)
        assert [(c.ordinal, c.document_name, c.page) for c in cited] == [(1, "handbook.pdf", 3)]
        assert "within thirty days" in cited[0].passage
        # the cited document is linked to the session as its evidence, with the answer
        detail = await OperatorStore(gw.store).session_detail(session.id)
        assert [(x.link_type, x.target_ref, x.relation) for x in detail.links] == [
            ("doc", f"kb-document:{added.document.id}", "evidence")
        ]

        # access counted off the hot path, by the job worker's periodic flush
        async def counted() -> bool:
            doc = await k.store.get_document(added.document.id)
            return doc is not None and doc.access_count >= 1

        await wait_for(counted, timeout=10)

        # deleting the document: gone from retrieval, but the answer's citations stay
        assert await k.store.remove_document(added.document.id)
        await adapter.submit(
            {"chat": "c", "thread": "t", "id": "2", "text": "How long do customers get refunds?"}
        )
        await wait_for(lambda: len(sink.texts_in("c", "t")) == 2, timeout=20)
        assert "handbook.pdf" not in sink.texts_in("c", "t")[1]
        assert [
            (c.document_name, c.page, c.passage) for c in await k.store.citations(reply.id)
        ] == [(c.document_name, c.page, c.passage) for c in cited]
        again = next(m for m in await gw.store.sessions.delta(session.id, 0) if m.id == reply.id)
        assert again.metadata["citations"] == reply.metadata["citations"]
        # one link per document however often it is cited
        for n in (3, 4):
            await adapter.submit(
                {"chat": "c", "thread": "t", "id": str(n), "text": "Economy class on short trips?"}
            )
            await wait_for(lambda: len(sink.texts_in("c", "t")) == n, timeout=20)  # noqa: B023
        assert "[1] travel.docx" in sink.texts_in("c", "t")[3]
        refs = [
            x.target_ref or ""
            for x in (await OperatorStore(gw.store).session_detail(session.id)).links
        ]
        assert sorted(refs) == sorted(
            {f"kb-document:{added.document.id}", f"kb-document:{travel.document.id}"}
        )


async def test_thread_documents_stay_in_their_thread(database_url: str, sink: SinkServer) -> None:
    agent = CitingAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False) as gw:
        await adapter.submit({"chat": "c", "thread": "a", "id": "1", "text": "hello"})
        await wait_for(lambda: sink.texts_in("c", "a"), timeout=20)
        key: SessionKey = (await gw.store.sessions.list_sessions())[0].key
        added = await gw.knowledge.add("secret.md", b"The vault code is 4711.", kb=thread_kb(key))
        chat = await gw.knowledge.add("menu.md", b"Lunch is served at noon.", kb=chat_kb(key))
        await wait_for(lambda: _ready(gw.knowledge.store, added.document.id), timeout=20)
        await wait_for(lambda: _ready(gw.knowledge.store, chat.document.id), timeout=20)
        await adapter.submit({"chat": "c", "thread": "a", "id": "2", "text": "the vault code?"})
        await adapter.submit({"chat": "c", "thread": "b", "id": "3", "text": "when is lunch?"})
        await wait_for(lambda: len(sink.texts_in("c", "a")) == 2, timeout=20)
        await wait_for(lambda: len(sink.texts_in("c", "b")) == 1, timeout=20)
        await adapter.submit({"chat": "c", "thread": "b", "id": "4", "text": "the vault code?"})
        await wait_for(lambda: len(sink.texts_in("c", "b")) == 2, timeout=20)
    assert "4711" in sink.texts_in("c", "a")[1]
    assert all("4711" not in text for text in sink.texts_in("c", "b"))
    assert "noon" in sink.texts_in("c", "b")[0]
