"""Durable ingest jobs on a real PostgreSQL: one document per content, states, retries with
backoff, failures with reasons, and a job taken over after its worker died."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import Sequence

import pytest

from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import EmbeddingError
from gateway.knowledge.service import FileRejected, Knowledge
from session_store.repos.knowledge import KnowledgeStore
from testsupport.documents import make_docx, make_pdf, make_scanned_pdf
from testsupport.harness import wait_for
from testsupport.knowledge import SharedLocalEmbedder, drain


async def test_the_same_file_twice_is_one_document(knowledge: Knowledge) -> None:
    data = make_pdf(["Llamas are camelids.", "The refund window is thirty days."])
    first = await knowledge.add("policy.pdf", data)
    second = await knowledge.add("copy-of-policy.pdf", data)
    assert first.created and not second.created
    assert first.document.id == second.document.id
    other_kb = await knowledge.add("policy.pdf", data, kb="legal")
    assert other_kb.created and other_kb.document.id != first.document.id
    docs = await knowledge.store.list_documents(kb_name="default")
    assert [d.id for d in docs] == [first.document.id]


async def test_a_job_goes_queued_to_ready_with_pages_and_sections(
    knowledge: Knowledge, kstore: KnowledgeStore
) -> None:
    pdf = await knowledge.add("policy.pdf", make_pdf(["Intro.", "Refunds take thirty days."]))
    docx = await knowledge.add(
        "handbook.docx", make_docx([("h1", "Leave"), ("p", "Twenty days of paid leave.")])
    )
    assert pdf.document.state == "queued"
    await drain(knowledge)
    ready = await kstore.get_document(pdf.document.id)
    assert ready is not None and ready.state == "ready" and ready.pages == 2
    assert ready.chunk_count == 2 and ready.attempts == 1
    hits = (await knowledge.retrieval.search("refunds thirty days", kbs=["default"])).hits
    assert (hits[0].document_name, hits[0].page) == ("policy.pdf", 2)
    hits = (await knowledge.retrieval.search("paid leave", kbs=["default"])).hits
    assert (hits[0].document_id, hits[0].section) == (docx.document.id, "Leave")


async def test_a_scanned_pdf_fails_at_once_with_its_reason(
    knowledge: Knowledge, kstore: KnowledgeStore
) -> None:
    added = await knowledge.add("scan.pdf", make_scanned_pdf(3))
    await drain(knowledge)
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.state == "failed" and doc.attempts == 1
    assert doc.state_text.startswith("failed: the PDF has no text layer (3 page(s)")
    # adding it again is another try (and fails the same way)
    again = await knowledge.add("scan.pdf", make_scanned_pdf(3))
    assert again.document.id == doc.id and again.document.state == "queued"


async def test_too_big_and_unsupported_files_are_refused(kstore: KnowledgeStore) -> None:
    k = Knowledge(kstore, SharedLocalEmbedder(), KnowledgeSettings(max_file_bytes=100))
    with pytest.raises(FileRejected, match="limit is 100"):
        await k.add("big.txt", b"x" * 101)
    with pytest.raises(FileRejected, match="unsupported file type"):
        await k.add("a.bin", bytes(range(100)))
    assert await kstore.list_documents() == []


class FlakyEmbedder(SharedLocalEmbedder):
    def __init__(self, failures: int, *, transient: bool = True) -> None:
        super().__init__()
        self.failures = failures
        self.transient = transient
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls <= self.failures:
            raise EmbeddingError("embedding server answered 503", transient=self.transient)
        return await super().embed(texts)


async def test_transient_failures_are_retried_with_backoff(kstore: KnowledgeStore) -> None:
    settings = KnowledgeSettings(backoff_seconds=0.3)
    k = Knowledge(kstore, FlakyEmbedder(2), settings)
    added = await k.add("notes.md", b"# Notes\n\nThe office opens at nine.")
    assert await k.process_one()
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.state == "queued" and "503" in (doc.error or "")
    assert not await k.process_one(), "the retry waits for its backoff"
    await wait_for(k.process_one, timeout=5)  # try 2 (fails), after 0.3 s
    await wait_for(k.process_one, timeout=5)  # try 3 (succeeds), after 1.2 s
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.state == "ready" and doc.attempts == 3


async def test_three_failed_tries_end_in_failed_with_the_reason(kstore: KnowledgeStore) -> None:
    k = Knowledge(kstore, FlakyEmbedder(99), KnowledgeSettings(backoff_seconds=0.05))
    added = await k.add("notes.md", b"# Notes\n\nThe office opens at nine.")

    async def failed() -> bool:
        await k.process_one()
        doc = await kstore.get_document(added.document.id)
        return doc is not None and doc.state == "failed"

    await wait_for(failed, timeout=10)
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.attempts == 3
    assert doc.state_text == "failed: gave up after 3 tries: embedding server answered 503"


async def test_an_abandoned_lease_is_taken_over(kstore: KnowledgeStore) -> None:
    dead = Knowledge(kstore, SharedLocalEmbedder(), KnowledgeSettings(lease_seconds=0.5))
    added = await dead.add("notes.md", b"# Notes\n\nThe office opens at nine.")
    job = await kstore.claim_job(owner="dead-worker", lease_seconds=0.5)
    assert job is not None and job.document.id == added.document.id
    live = Knowledge(kstore, SharedLocalEmbedder(), KnowledgeSettings())
    assert not await live.process_one(), "the lease still holds"
    await wait_for(live.process_one, timeout=5)
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.state == "ready" and doc.attempts == 2
    # the dead worker's late result is refused
    from gateway.core.errors import LeaseLost

    with pytest.raises(LeaseLost):
        await kstore.finish_job(job, [], pages=None)


_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from gateway.knowledge.embed import LocalEmbedder
    from gateway.knowledge.service import Knowledge, KnowledgeSettings
    from session_store.repos.knowledge import KnowledgeStore
    from session_store.store import Store

    class Stuck(LocalEmbedder):
        async def embed(self, texts):
            print("embedding", flush=True)
            await asyncio.sleep(3600)

    async def main():
        store = await Store.connect(sys.argv[1], min_size=1, max_size=2)
        k = Knowledge(KnowledgeStore(store.db), Stuck(), KnowledgeSettings(lease_seconds=1.0))
        await k.process_one()

    asyncio.run(main())
    """
)


async def test_a_job_killed_mid_embedding_resumes_elsewhere(
    database_url: str, knowledge: Knowledge, kstore: KnowledgeStore
) -> None:
    added = await knowledge.add("notes.md", b"# Notes\n\nThe office opens at nine.")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _WORKER,
        database_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line.strip() == b"embedding"
        doc = await kstore.get_document(added.document.id)
        assert doc is not None and doc.state == "embedding"
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await wait_for(knowledge.process_one, timeout=10)
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.state == "ready" and doc.attempts == 2


async def test_removing_a_document_while_its_ingest_finishes_does_not_deadlock(
    database_url: str, knowledge: Knowledge, kstore: KnowledgeStore
) -> None:
    """An ingest finishes by locking its document's row, then the shared word statistics; a
    removal of the same document must take them in the same order. The other way round, the
    two wait on each other and PostgreSQL kills one ("deadlock detected", a 503 at the API)."""
    import asyncpg

    added = await knowledge.add("notes.md", b"# Notes\n\nThe office opens at nine.")
    await wait_for(knowledge.process_one, timeout=10)
    doc_id = added.document.id
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            # what finish_job does first: the document's row
            kb_id = await conn.fetchval(
                "UPDATE kb_documents SET updated_at = now() WHERE id = $1 RETURNING kb_id", doc_id
            )
            removal = asyncio.ensure_future(kstore.remove_document(doc_id))
            await asyncio.sleep(0.3)
            assert not removal.done(), "the removal waits for the document's row"
            # ...then the word statistics, in lexeme order
            await conn.fetch(
                "SELECT lexeme FROM kb_terms WHERE kb_id = $1 ORDER BY lexeme FOR UPDATE", kb_id
            )
        removed = await asyncio.wait_for(removal, timeout=10)
    finally:
        await conn.close()
    assert removed is not None and removed.document_id == doc_id
    assert await kstore.get_document(doc_id) is None
