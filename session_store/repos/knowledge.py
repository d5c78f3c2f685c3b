"""The knowledge base's store: knowledge bases, files by content hash, documents
with their durable ingest jobs, passages with full text and (where the server has pgvector)
embeddings, hybrid search, access counters, frozen citations and whole documents' passages
(``WholeDocuments``; documents' summaries are ``document_summaries``).

Runs on the ``Store``'s ``Database`` (its one error boundary); callers get frozen records."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

from session_store.db import Database
from session_store.errors import LeaseLost
from session_store.repos.document_summaries import DocumentSummaries
from session_store.rows import Column, reader
from session_store.sql import load
from session_store.values import ReplyTarget, SessionKey

SQL = load(__package__, "knowledge.sql")

DocumentState = Literal["queued", "parsing", "embedding", "ready", "failed"]
#: where a file's bytes are: ``kb_files.content``, or an S3-compatible bucket (by hash)
FileStorage = Literal["postgres", "s3"]
#: reciprocal-rank fusion constant (the usual 60)
RRF_K = 60
#: full text matches on the question's rarest words while they are in fewer passages than
#: this, and ranks at most ``LEXICAL_RANKED`` matches (bounded cost on a large base: each
#: ranked match is a heap row read, about 1,000 of them were 10-15 ms at 100,000 passages)
LEXICAL_MATCH_BUDGET = 300
LEXICAL_RANKED = 400


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeBase:
    id: int
    name: str
    embedding_model: str
    embedding_dim: int
    created_at: datetime


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

    row_columns: ClassVar[Mapping[str, Column]] = {
        "notify_target": Column(convert=ReplyTarget.from_json, if_null=None),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    """An operator knowledge base assigned to a chat (every thread in it searches it)."""

    kb_name: str
    platform: str
    scope: str
    chat_id: str
    created_at: datetime

    @property
    def chat(self) -> str:
        """``platform:scope:chat``, as ``gateway kb assign --chat`` takes it (a session key's
        written form: a Matrix room's ``:`` as ``%3A``)."""
        key = SessionKey(platform=self.platform, scope=self.scope, chat_id=self.chat_id)
        return key.chat_text


@dataclass(frozen=True, slots=True, kw_only=True)
class RemovedDocument:
    document_id: int
    sha256: str
    #: where the file's bytes were when no other document uses them any more (the caller
    #: deletes an S3 object), ``None`` while another document still uses them
    file_removed: FileStorage | None


@dataclass(frozen=True, slots=True, kw_only=True)
class AddedDocument:
    document: DocumentRecord
    #: false when the same content was already in this knowledge base
    created: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestJob:
    """A claimed ingest job: the document, its bytes, and the model its base is built with."""

    document: DocumentRecord
    #: the file's bytes, or ``None`` when they are in the S3-compatible bucket (``storage``)
    content: bytes | None
    embedding_model: str
    embedding_dim: int
    owner: str
    storage: FileStorage = "postgres"

    row_columns: ClassVar[Mapping[str, Column]] = {
        "document": Column(convert=reader(DocumentRecord), whole_row=True),
        "content": Column(convert=bytes, if_null=None),
        # the claim sets the lease owner to the claimer's token
        "owner": Column(name="lease_owner"),
    }


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
    #: the session whose minutes the cited document is (its page: /ops/sessions/<id>)
    minutes_of: int | None = None


_kb = reader(KnowledgeBase)
_document = reader(DocumentRecord)
_assignment = reader(Assignment)
_job = reader(IngestJob)
_hit = reader(PassageHit)
_citation = reader(CitationRecord)


def fuse(
    lexical: Sequence[Mapping[str, Any]], nearest: Sequence[Mapping[str, Any]], *, limit: int
) -> list[PassageHit]:
    """Reciprocal-rank fusion (``1 / (RRF_K + rank)`` summed over the rankings that found a
    passage) of the two rankings' rows, best first (ties by passage id)."""
    found: dict[int, dict[str, Any]] = {}
    for arm, rows in (("lexical", lexical), ("vector", nearest)):
        for rank, row in enumerate(rows, start=1):
            hit = found.setdefault(
                row["chunk_id"],
                {
                    **dict(row),
                    "score": 0.0,
                    "lexical_rank": None,
                    "lexical_score": None,
                    "vector_rank": None,
                    "vector_score": None,
                },
            )
            hit[f"{arm}_rank"] = rank
            hit[f"{arm}_score"] = float(row["score"])
            hit["score"] += 1.0 / (RRF_K + rank)
    ordered = sorted(found.values(), key=lambda h: (-h["score"], h["chunk_id"]))
    return [_hit(h) for h in ordered[:limit]]


def _vector_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(f"{x:.6g}" for x in vector) + "]"


class WholeDocuments:
    """Whole documents for a turn: every passage of a document, in order."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def passages(self, document_ids: Sequence[int]) -> list[Mapping[str, Any]]:
        """Every passage of the documents (ready ones), in the given order of documents and
        in reading order within each: ``chunk_id, document_id, page, section, content,
        ordinal, tokens, document_name, kb_name``."""
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.document_passages, list(document_ids))
        return [dict(r) for r in rows]


class KnowledgeStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        #: every passage of whole documents (``WholeDocuments``)
        self.whole = WholeDocuments(db)
        #: documents' summaries (``DocumentSummaries``)
        self.summaries = DocumentSummaries(db)
        self._vector: bool | None = None
        self._halfvec: bool | None = None

    @property
    def db(self) -> Database:
        return self._db

    async def vector_enabled(self) -> bool:
        """Whether this database has the embedding column (pgvector was there at migration)."""
        if self._vector is None:
            async with self._db.connection() as conn:
                self._vector = bool(await conn.fetchval(SQL.has_vector_column))
        return self._vector

    async def vector_available(self) -> bool:
        """Whether the server ships the ``vector`` extension at all."""
        async with self._db.connection() as conn:
            return bool(await conn.fetchval(SQL.vector_available))

    # --- knowledge bases -----------------------------------------------------------------

    async def ensure_kb(self, name: str, *, model: str, dim: int) -> KnowledgeBase:
        """The knowledge base ``name``, created for ``model``; one built with another model
        switches to this one: its vectors are dropped and its documents re-embedded by jobs."""
        async with self._db.transaction() as conn:
            await conn.execute(SQL.ensure_kb, name, model, dim)
            row = await conn.fetchrow(SQL.get_kb_for_update, name)
            assert row is not None
            kb = _kb(row)
            if kb.embedding_model == model and kb.embedding_dim == dim:
                return kb
            if await self.vector_enabled():
                await conn.execute(SQL.drop_kb_vectors, kb.id)
            await conn.execute(SQL.requeue_kb_documents, kb.id)
            switched = await conn.fetchrow(SQL.switch_kb_model, kb.id, model, dim)
            assert switched is not None
            return _kb(switched)

    async def any_kb(self) -> bool:
        async with self._db.connection() as conn:
            return bool(await conn.fetchval(SQL.any_kb))

    async def kbs(self, names: Sequence[str] | None = None) -> list[KnowledgeBase]:
        async with self._db.connection() as conn:
            if names is None:
                rows = await conn.fetch(SQL.list_kbs)
            else:
                rows = await conn.fetch(SQL.kbs_by_name, list(names))
        return [_kb(r) for r in rows]

    async def scope_kbs(
        self, names: Sequence[str], *, platform: str, scope: str, chat_id: str
    ) -> list[KnowledgeBase]:
        """The bases ``names`` that exist, and every base assigned to the chat."""
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.scope_kbs, list(names), platform, scope, chat_id)
        return [_kb(r) for r in rows]

    async def assign(self, kb: KnowledgeBase, *, platform: str, scope: str, chat_id: str) -> bool:
        """Assign ``kb`` to a chat; ``False`` when it already was."""
        async with self._db.connection() as conn:
            status = await conn.execute(SQL.assign_kb, kb.id, platform, scope, chat_id)
        return str(status).endswith(" 1")

    async def unassign(self, kb_name: str, *, platform: str, scope: str, chat_id: str) -> bool:
        async with self._db.connection() as conn:
            status = await conn.execute(SQL.unassign_kb, kb_name, platform, scope, chat_id)
        return not str(status).endswith(" 0")

    async def assignments(self, *, kb_name: str | None = None) -> list[Assignment]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.list_assignments, kb_name)
        return [_assignment(r) for r in rows]

    # --- documents -----------------------------------------------------------------------

    async def add_document(
        self,
        kb: KnowledgeBase,
        *,
        name: str,
        content: bytes,
        media_type: str,
        notify_target: ReplyTarget | None = None,
        storage: FileStorage = "postgres",
    ) -> AddedDocument:
        """Store the file by its hash and queue its ingest job; the same content in the same
        knowledge base is the same document (a failed one is tried again). With ``storage``
        ``s3`` the caller has put the bytes in the bucket already; only the row is written."""
        sha = hashlib.sha256(content).hexdigest()
        target = None if notify_target is None else notify_target.to_json()
        kept = content if storage == "postgres" else None
        async with self._db.transaction() as conn:
            await conn.execute(SQL.insert_file, sha, len(content), kept, storage)
            doc_id = await conn.fetchval(SQL.insert_document, kb.id, sha, name, media_type, target)
            created = doc_id is not None
            if doc_id is None:
                existing = await conn.fetchrow(SQL.find_document, kb.id, sha)
                assert existing is not None
                doc_id = existing["id"]
                await conn.execute(SQL.retry_failed_document, doc_id)
            row = await conn.fetchrow(SQL.get_document, doc_id)
        assert row is not None
        return AddedDocument(document=_document(row), created=created)

    async def get_document(self, document_id: int) -> DocumentRecord | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.get_document, document_id)
        return None if row is None else _document(row)

    async def list_documents(
        self, *, kb_name: str | None = None, limit: int = 1000
    ) -> list[DocumentRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.list_documents, kb_name, limit)
        return [_document(r) for r in rows]

    async def remove_document(self, document_id: int) -> RemovedDocument | None:
        """Delete a document and its passages (gone from retrieval at once); citations already
        frozen with answers stay as they are. ``None``: there was no such document."""
        async with self._db.transaction() as conn:
            kb_id = await conn.fetchval(SQL.document_kb, document_id)
            if kb_id is None:
                return None
            await conn.execute(SQL.remove_terms, document_id, kb_id)
            sha = await conn.fetchval(SQL.delete_document, document_id)
            if sha is None:
                return None
            storage = await conn.fetchval(SQL.delete_unused_file, sha)
        return RemovedDocument(document_id=document_id, sha256=sha, file_removed=storage)

    async def reindex_document(self, document_id: int) -> bool:
        async with self._db.connection() as conn:
            status = await conn.execute(SQL.requeue_document, document_id)
        return str(status).endswith(" 1")

    async def set_notify(self, document_id: int, target: ReplyTarget) -> None:
        async with self._db.connection() as conn:
            await conn.execute(SQL.set_notify, document_id, target.to_json())

    async def take_notify(self, document_id: int) -> ReplyTarget | None:
        """The thread to tell that a finished document is ready or failed, for the one caller
        that gets to tell it (``None`` for everyone else)."""
        async with self._db.connection() as conn:
            target = await conn.fetchval(SQL.take_notify, document_id)
        return None if target is None else ReplyTarget.from_json(target)

    async def job_counts(self) -> dict[str, int]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.job_counts)
        return {r["state"]: r["n"] for r in rows}

    # --- ingest jobs ---------------------------------------------------------------------

    async def claim_job(self, *, owner: str, lease_seconds: float) -> IngestJob | None:
        async with self._db.transaction() as conn:
            row = await conn.fetchrow(SQL.claim_job, owner, lease_seconds)
        return None if row is None else _job(row)

    async def job_progress(
        self, job: IngestJob, state: DocumentState, *, lease_seconds: float
    ) -> None:
        """Move the job on (and renew its lease) while we still own it."""
        async with self._db.connection() as conn:
            found = await conn.fetchval(
                SQL.job_progress, job.document.id, job.owner, state, lease_seconds
            )
        if found is None:
            raise LeaseLost(f"ingest job of document {job.document.id} was taken over")

    async def finish_job(
        self, job: IngestJob, chunks: Sequence[NewChunk], *, pages: int | None
    ) -> None:
        """Replace the document's passages and mark it ready, in one transaction."""
        doc = job.document
        async with self._db.transaction() as conn:
            kb_id = await conn.fetchval(SQL.finish_job, doc.id, job.owner, pages, len(chunks))
            if kb_id is None:
                raise LeaseLost(f"ingest job of document {doc.id} was taken over")
            await conn.execute(SQL.remove_terms, doc.id, kb_id)
            await conn.execute(SQL.delete_chunks, doc.id)
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
                    SQL.insert_chunks_with_vectors,
                    doc.id,
                    kb_id,
                    *columns,
                    job.embedding_dim,
                    [_vector_text(v) for v in embedded],
                )
            else:
                await conn.execute(SQL.insert_chunks, doc.id, kb_id, *columns)
            await conn.execute(SQL.add_terms, doc.id, kb_id)

    async def fail_job(self, job: IngestJob, error: str, *, retry_in: float | None) -> None:
        """A failed try: queued again after ``retry_in`` seconds, or failed for good."""
        async with self._db.connection() as conn:
            await conn.fetchval(SQL.fail_job, job.document.id, job.owner, error[:500], retry_in)

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
        ``vector_kb_ids`` (the bases built with the query vector's model), each ranking's
        best ``candidates`` fused by reciprocal rank. The two rankings run at once, on two
        connections: the search takes as long as the slower one, not both."""
        if not kb_ids:
            return []
        use_vector = vector is not None and bool(vector_kb_ids) and await self.vector_enabled()
        lexical = self._lexical(query, kb_ids, candidates)
        if not use_vector or vector is None:
            return fuse(await lexical, [], limit=limit)
        # both awaited to the end, so neither is left running when the other fails
        found = await asyncio.gather(
            lexical, self._nearest(vector, vector_kb_ids, candidates), return_exceptions=True
        )
        ranked: list[list[Mapping[str, Any]]] = []
        for rows in found:
            if isinstance(rows, BaseException):
                raise rows
            ranked.append(rows)
        return fuse(ranked[0], ranked[1], limit=limit)

    async def _lexical(
        self, query: str, kb_ids: Sequence[int], candidates: int
    ) -> list[Mapping[str, Any]]:
        async with self._db.connection() as conn:
            return list(
                await conn.fetch(
                    SQL.search_lexical,
                    list(kb_ids),
                    query,
                    candidates,
                    LEXICAL_MATCH_BUDGET,
                    LEXICAL_RANKED,
                )
            )

    async def _nearest(
        self, vector: Sequence[float], kb_ids: Sequence[int], candidates: int
    ) -> list[Mapping[str, Any]]:
        text = _vector_text(vector)
        if len(vector) == 256:
            async with self._db.transaction() as conn:
                if self._halfvec is None:
                    self._halfvec = bool(await conn.fetchval(SQL.has_halfvec_index))
                sql = SQL.search_vector_256 if self._halfvec else SQL.search_vector_256_full
                await conn.execute(SQL.hnsw_settings)
                return list(await conn.fetch(sql, list(kb_ids), text, candidates))
        async with self._db.connection() as conn:
            return list(
                await conn.fetch(SQL.search_vector_any, list(kb_ids), text, candidates, len(vector))
            )

    async def count_access(self, documents: Mapping[int, int], chunks: Mapping[int, int]) -> None:
        async with self._db.transaction() as conn:
            if documents:
                await conn.execute(
                    SQL.count_document_access, list(documents), list(documents.values())
                )
            if chunks:
                await conn.execute(SQL.count_chunk_access, list(chunks), list(chunks.values()))

    async def citations(self, message_id: int) -> list[CitationRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.citations, message_id)
        return [_citation(r) for r in rows]
