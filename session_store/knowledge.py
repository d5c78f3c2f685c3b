"""The knowledge base's store (issue 15): knowledge bases, files by content hash, documents
with their durable ingest jobs, passages with full text and (where the server has pgvector)
embeddings, hybrid search, access counters and frozen citations.

Runs on the ``Store``'s ``Database`` (its one error boundary); callers get frozen records."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from session_store import knowledge_queries as q
from session_store.db import Database
from session_store.errors import LeaseLost
from session_store.values import ReplyTarget

DocumentState = Literal["queued", "parsing", "embedding", "ready", "failed"]
#: reciprocal-rank fusion constant (the usual 60)
RRF_K = 60
#: full text matches on the question's rarest words while they are in fewer passages than
#: this, and ranks at most ``LEXICAL_RANKED`` matches (bounded cost on a large base)
LEXICAL_MATCH_BUDGET = 500
LEXICAL_RANKED = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeBase:
    id: int
    name: str
    embedding_model: str
    embedding_dim: int
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> KnowledgeBase:
        return cls(
            id=row["id"],
            name=row["name"],
            embedding_model=row["embedding_model"],
            embedding_dim=row["embedding_dim"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentRecord:
    id: int
    kb_id: int
    kb_name: str
    sha256: str
    name: str
    media_type: str
    state: DocumentState
    error: str | None
    attempts: int
    pages: int | None
    chunk_count: int
    access_count: int
    notify_target: ReplyTarget | None
    created_at: datetime
    updated_at: datetime

    @property
    def state_text(self) -> str:
        """``failed: reason`` for a failed document, else its state."""
        return f"failed: {self.error}" if self.state == "failed" else self.state

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DocumentRecord:
        target = row["notify_target"]
        return cls(
            id=row["id"],
            kb_id=row["kb_id"],
            kb_name=row["kb_name"],
            sha256=row["sha256"],
            name=row["name"],
            media_type=row["media_type"],
            state=row["state"],
            error=row["error"],
            attempts=row["attempts"],
            pages=row["pages"],
            chunk_count=row["chunk_count"],
            access_count=row["access_count"],
            notify_target=None if target is None else ReplyTarget.from_json(target),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AddedDocument:
    document: DocumentRecord
    #: false when the same content was already in this knowledge base
    created: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestJob:
    """A claimed ingest job: the document, its bytes, and the model its base is built with."""

    document: DocumentRecord
    content: bytes
    embedding_model: str
    embedding_dim: int
    owner: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, owner: str) -> IngestJob:
        return cls(
            document=DocumentRecord.from_row(row),
            content=bytes(row["content"]),
            embedding_model=row["embedding_model"],
            embedding_dim=row["embedding_dim"],
            owner=owner,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class NewChunk:
    ordinal: int
    page: int | None
    section: str
    content: str
    tokens: int
    embedding: Sequence[float] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PassageHit:
    """One retrieved passage with both rankings and the fused score."""

    chunk_id: int
    document_id: int
    document_name: str
    kb_name: str
    ordinal: int
    page: int | None
    section: str
    content: str
    score: float
    lexical_rank: int | None
    lexical_score: float | None
    vector_rank: int | None
    vector_score: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> PassageHit:
        return cls(
            chunk_id=row["chunk_id"],
            document_id=row["document_id"],
            document_name=row["document_name"],
            kb_name=row["kb_name"],
            ordinal=row["ordinal"],
            page=row["page"],
            section=row["section"],
            content=row["content"],
            score=row["score"],
            lexical_rank=row["lexical_rank"],
            lexical_score=row["lexical_score"],
            vector_rank=row["vector_rank"],
            vector_score=row["vector_score"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CitationRecord:
    """A citation frozen with an answer: never changed after the answer was stored."""

    message_id: int
    ordinal: int
    document_id: int
    chunk_id: int
    document_name: str
    page: int | None
    section: str
    passage: str
    score: float
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CitationRecord:
        return cls(
            message_id=row["message_id"],
            ordinal=row["ordinal"],
            document_id=row["document_id"],
            chunk_id=row["chunk_id"],
            document_name=row["document_name"],
            page=row["page"],
            section=row["section"],
            passage=row["passage"],
            score=row["score"],
            created_at=row["created_at"],
        )


def _vector_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.6g}" for x in vector) + "]"


class KnowledgeStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._vector: bool | None = None

    async def vector_enabled(self) -> bool:
        """Whether this database has the embedding column (pgvector was there at migration)."""
        if self._vector is None:
            async with self._db.connection() as conn:
                self._vector = bool(await conn.fetchval(q.HAS_VECTOR_COLUMN))
        return self._vector

    async def vector_available(self) -> bool:
        """Whether the server ships the ``vector`` extension at all."""
        async with self._db.connection() as conn:
            return bool(await conn.fetchval(q.VECTOR_AVAILABLE))

    # --- knowledge bases -----------------------------------------------------------------

    async def ensure_kb(self, name: str, *, model: str, dim: int) -> KnowledgeBase:
        """The knowledge base ``name``, created for ``model``; one built with another model
        switches to this one: its vectors are dropped and its documents re-embedded by jobs."""
        async with self._db.transaction() as conn:
            await conn.execute(q.ENSURE_KB, name, model, dim)
            row = await conn.fetchrow(q.GET_KB_FOR_UPDATE, name)
            assert row is not None
            kb = KnowledgeBase.from_row(row)
            if kb.embedding_model == model and kb.embedding_dim == dim:
                return kb
            if await self.vector_enabled():
                await conn.execute(q.DROP_KB_VECTORS, kb.id)
            await conn.execute(q.REQUEUE_KB_DOCUMENTS, kb.id)
            switched = await conn.fetchrow(q.SWITCH_KB_MODEL, kb.id, model, dim)
            assert switched is not None
            return KnowledgeBase.from_row(switched)

    async def any_kb(self) -> bool:
        async with self._db.connection() as conn:
            return bool(await conn.fetchval(q.ANY_KB))

    async def kbs(self, names: Sequence[str] | None = None) -> list[KnowledgeBase]:
        async with self._db.connection() as conn:
            if names is None:
                rows = await conn.fetch(q.LIST_KBS)
            else:
                rows = await conn.fetch(q.KBS_BY_NAME, list(names))
        return [KnowledgeBase.from_row(r) for r in rows]

    # --- documents -----------------------------------------------------------------------

    async def add_document(
        self,
        kb: KnowledgeBase,
        *,
        name: str,
        content: bytes,
        media_type: str,
        notify_target: ReplyTarget | None = None,
    ) -> AddedDocument:
        """Store the file by its hash and queue its ingest job; the same content in the same
        knowledge base is the same document (a failed one is tried again)."""
        sha = hashlib.sha256(content).hexdigest()
        target = None if notify_target is None else notify_target.to_json()
        async with self._db.transaction() as conn:
            await conn.execute(q.INSERT_FILE, sha, len(content), content)
            doc_id = await conn.fetchval(q.INSERT_DOCUMENT, kb.id, sha, name, media_type, target)
            created = doc_id is not None
            if doc_id is None:
                existing = await conn.fetchrow(q.FIND_DOCUMENT, kb.id, sha)
                assert existing is not None
                doc_id = existing["id"]
                await conn.execute(q.RETRY_FAILED_DOCUMENT, doc_id)
            row = await conn.fetchrow(q.GET_DOCUMENT, doc_id)
        assert row is not None
        return AddedDocument(document=DocumentRecord.from_row(row), created=created)

    async def get_document(self, document_id: int) -> DocumentRecord | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(q.GET_DOCUMENT, document_id)
        return None if row is None else DocumentRecord.from_row(row)

    async def list_documents(
        self, *, kb_name: str | None = None, limit: int = 1000
    ) -> list[DocumentRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(q.LIST_DOCUMENTS, kb_name, limit)
        return [DocumentRecord.from_row(r) for r in rows]

    async def remove_document(self, document_id: int) -> bool:
        """Delete a document and its passages (gone from retrieval at once); citations already
        frozen with answers stay as they are."""
        async with self._db.transaction() as conn:
            kb_id = await conn.fetchval(q.DOCUMENT_KB, document_id)
            if kb_id is None:
                return False
            await conn.execute(q.REMOVE_TERMS, document_id, kb_id)
            sha = await conn.fetchval(q.DELETE_DOCUMENT, document_id)
            if sha is None:
                return False
            await conn.execute(q.DELETE_UNUSED_FILE, sha)
        return True

    async def reindex_document(self, document_id: int) -> bool:
        async with self._db.connection() as conn:
            status = await conn.execute(q.REQUEUE_DOCUMENT, document_id)
        return str(status).endswith(" 1")

    async def set_notify(self, document_id: int, target: ReplyTarget) -> None:
        async with self._db.connection() as conn:
            await conn.execute(q.SET_NOTIFY, document_id, target.to_json())

    async def take_notify(self, document_id: int) -> ReplyTarget | None:
        """The thread to tell that a finished document is ready or failed, for the one caller
        that gets to tell it (``None`` for everyone else)."""
        async with self._db.connection() as conn:
            target = await conn.fetchval(q.TAKE_NOTIFY, document_id)
        return None if target is None else ReplyTarget.from_json(target)

    async def job_counts(self) -> dict[str, int]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(q.JOB_COUNTS)
        return {r["state"]: r["n"] for r in rows}

    # --- ingest jobs ---------------------------------------------------------------------

    async def claim_job(self, *, owner: str, lease_seconds: float) -> IngestJob | None:
        async with self._db.transaction() as conn:
            row = await conn.fetchrow(q.CLAIM_JOB, owner, lease_seconds)
        return None if row is None else IngestJob.from_row(row, owner=owner)

    async def job_progress(
        self, job: IngestJob, state: DocumentState, *, lease_seconds: float
    ) -> None:
        """Move the job on (and renew its lease) while we still own it."""
        async with self._db.connection() as conn:
            found = await conn.fetchval(
                q.JOB_PROGRESS, job.document.id, job.owner, state, lease_seconds
            )
        if found is None:
            raise LeaseLost(f"ingest job of document {job.document.id} was taken over")

    async def finish_job(
        self, job: IngestJob, chunks: Sequence[NewChunk], *, pages: int | None
    ) -> None:
        """Replace the document's passages and mark it ready, in one transaction."""
        doc = job.document
        async with self._db.transaction() as conn:
            kb_id = await conn.fetchval(q.FINISH_JOB, doc.id, job.owner, pages, len(chunks))
            if kb_id is None:
                raise LeaseLost(f"ingest job of document {doc.id} was taken over")
            await conn.execute(q.REMOVE_TERMS, doc.id, kb_id)
            await conn.execute(q.DELETE_CHUNKS, doc.id)
            columns = (
                [c.ordinal for c in chunks],
                [c.page for c in chunks],
                [c.section for c in chunks],
                [c.content for c in chunks],
                [c.tokens for c in chunks],
            )
            embedded = [c.embedding for c in chunks if c.embedding is not None]
            if embedded and len(embedded) == len(chunks) and await self.vector_enabled():
                await conn.execute(
                    q.INSERT_CHUNKS_WITH_VECTORS,
                    doc.id,
                    kb_id,
                    *columns,
                    job.embedding_dim,
                    [_vector_text(v) for v in embedded],
                )
            else:
                await conn.execute(q.INSERT_CHUNKS, doc.id, kb_id, *columns)
            await conn.execute(q.ADD_TERMS, doc.id, kb_id)

    async def fail_job(self, job: IngestJob, error: str, *, retry_in: float | None) -> None:
        """A failed try: queued again after ``retry_in`` seconds, or failed for good."""
        async with self._db.connection() as conn:
            await conn.fetchval(q.FAIL_JOB, job.document.id, job.owner, error[:500], retry_in)

    # --- retrieval -----------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        kb_ids: Sequence[int],
        vector: Sequence[float] | None,
        vector_kb_ids: Sequence[int],
        candidates: int = 40,
        limit: int = 10,
    ) -> list[PassageHit]:
        """Hybrid search over ``kb_ids``: full text everywhere, embeddings in
        ``vector_kb_ids`` (the bases built with the query vector's model)."""
        if not kb_ids:
            return []
        use_vector = vector is not None and bool(vector_kb_ids) and await self.vector_enabled()
        dims = len(vector) if vector is not None else 0
        args = (
            list(kb_ids),
            query,
            _vector_text(vector) if use_vector and vector is not None else None,
            list(vector_kb_ids) if use_vector else None,
            candidates,
            limit,
            RRF_K,
            dims if use_vector else None,
            LEXICAL_MATCH_BUDGET,
            LEXICAL_RANKED,
        )
        if not use_vector:
            async with self._db.connection() as conn:
                rows = await conn.fetch(q.SEARCH_LEXICAL, *args)
        elif dims == 256:
            async with self._db.transaction() as conn:
                await conn.execute(q.HNSW_SETTINGS)
                rows = await conn.fetch(q.SEARCH_HYBRID_256, *args)
        else:
            async with self._db.connection() as conn:
                rows = await conn.fetch(q.SEARCH_HYBRID_ANY, *args)
        return [PassageHit.from_row(r) for r in rows]

    async def count_access(self, documents: Mapping[int, int], chunks: Mapping[int, int]) -> None:
        async with self._db.transaction() as conn:
            if documents:
                await conn.execute(
                    q.COUNT_DOCUMENT_ACCESS, list(documents), list(documents.values())
                )
            if chunks:
                await conn.execute(q.COUNT_CHUNK_ACCESS, list(chunks), list(chunks.values()))

    async def citations(self, message_id: int) -> list[CitationRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(q.CITATIONS, message_id)
        return [CitationRecord.from_row(r) for r in rows]
