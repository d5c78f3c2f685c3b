"""The knowledge base as the gateway uses it: add files (queued as durable ingest jobs), the
job worker (parse -> chunk -> embed -> ready, three tries with backoff, claimed across replicas
with a lease), hybrid search, and retrieval for a turn with citations frozen in the answer."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog

from gateway.agents.prompt import estimate_text
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import StoreError
from gateway.core.hub import Signal
from gateway.core.settings import Settings
from gateway.files.transcribe import is_audio
from gateway.knowledge.attachments import FileSource
from gateway.knowledge.citations import (
    PROMPT_HEADER,
    TurnKnowledge,
    _loc,
    _trace_hit,
    source_label,
)
from gateway.knowledge.config import Announce, FileRejected, KnowledgeSettings
from gateway.knowledge.embed import Embedder, EmbeddingError, LocalEmbedder, RemoteEmbedder
from gateway.knowledge.files import FileStorageError, S3Files
from gateway.knowledge.ingest import IngestWorker
from gateway.knowledge.inline import (
    shared_files,
)
from gateway.knowledge.places import DEFAULT_KB, Chat, chat_kb, thread_kb
from gateway.knowledge.shared import SharedFiles
from gateway.knowledge.whole import (
    SUMMARY_HEADER,
    Chosen,
    as_hit,
    choose,
    whole_documents,
)
from session_store.records import MessageRecord
from session_store.repos.knowledge import (
    KnowledgeBase,
    KnowledgeStore,
    PassageHit,
)

log = structlog.get_logger(__name__)


class KnowledgeSearch(Protocol):
    """What the ``search_knowledge`` tool needs of the knowledge base: the turn's retriever
    over the turn's scope."""

    async def search_in(self, key: SessionKey, query: str, *, limit: int = 5) -> SearchResult: ...


#: how long "no knowledge base exists" is believed before it is asked again
NO_BASES_SECONDS = 2.0
#: knowledge bases remembered per process (the rest are read again when used)
MAX_CACHED_KBS = 1024


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedding_base_url:
        key = settings.embedding_api_key
        return RemoteEmbedder(
            settings.embedding_base_url,
            model=settings.embedding_model,
            api_key=key.get_secret_value() if key else None,
        )
    return LocalEmbedder()


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    query: str
    hits: tuple[PassageHit, ...]
    #: which bases were searched, and how: ``lexical`` alone or ``hybrid``
    mode: str
    timings_ms: Mapping[str, float]


class Knowledge(SharedFiles):
    def __init__(
        self,
        store: KnowledgeStore,
        embedder: Embedder,
        settings: KnowledgeSettings | None = None,
        *,
        wake: Signal | None = None,
        announce: Announce | None = None,
        files: S3Files | None = None,
    ) -> None:
        self.announce = announce
        #: the S3-compatible file store, when configured (else the bytes are in PostgreSQL)
        self.files = files
        self.store = store
        self.embedder = embedder
        self.settings = settings or KnowledgeSettings()
        self.wake = wake or Signal()
        #: set when a document is ready: its summary is due (``gateway.knowledge.summaries``)
        self.summary_wake = Signal()
        #: while no knowledge base exists anywhere, turns skip the lookup (it was a
        #: database transaction per message); rechecked every NO_BASES_SECONDS, and at once
        #: after this replica creates one (another replica's shows within that interval,
        #: sooner than its first document is read)
        self._no_bases_until = 0.0
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: bases by name, most recently used last: bounded (every thread that shares a file
        #: has a base of its own, ``thread:<key>``; a week of traffic must not keep them all)
        self._kbs: OrderedDict[str, KnowledgeBase] = OrderedDict()
        self._doc_access: Counter[int] = Counter()
        self._chunk_access: Counter[int] = Counter()
        self._worker = IngestWorker(self)

    async def aclose(self) -> None:
        with contextlib.suppress(StoreError):
            await self.flush_access()
        await self.embedder.aclose()

    # --- adding ----------------------------------------------------------------------------

    async def kb(self, name: str) -> KnowledgeBase:
        """The knowledge base ``name``, built with this gateway's embedding model."""
        cached = self._kbs.get(name)
        if cached is not None and cached.embedding_model == self.embedder.model:
            self._kbs.move_to_end(name)
            return cached
        kb = await self.store.ensure_kb(
            name, model=self.embedder.model, dim=await self.embedder.dimension()
        )
        self._kbs[name] = kb
        self._kbs.move_to_end(name)
        while len(self._kbs) > MAX_CACHED_KBS:
            self._kbs.popitem(last=False)
        self._no_bases_until = 0.0
        return kb

    async def switch_model(self, name: str) -> None:
        """Rebuild ``name`` with this gateway's embedding model (its documents are queued
        again), instead of mixing two models in one index."""
        self._kbs.pop(name, None)
        await self.kb(name)

    async def adopt_model(self) -> list[str]:
        """At start: every knowledge base built with another embedding model switches to this
        gateway's (its documents are re-embedded by the jobs). Returns the bases switched."""
        switched = []
        for base in await self.store.kbs():
            if base.embedding_model != self.embedder.model:
                await self.kb(base.name)
                switched.append(base.name)
        if switched:
            self.wake.set()
            log.info("kb_model_changed", kbs=switched, model=self.embedder.model)
        return switched

    # --- the job worker (gateway.knowledge.ingest) -----------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and run ingest jobs until ``stopping``; survives failures of one job and of
        the database."""
        await self._worker.run(stopping)

    async def process_one(self) -> bool:
        """Run one due job; ``False`` when there was none."""
        return await self._worker.process_one()

    async def remove(self, document_id: int) -> bool:
        """Delete a document and its passages (citations stay frozen); its file's bytes go
        too once no document uses them (from the bucket as well). ``False``: no such one."""
        removed = await self.store.remove_document(document_id)
        if removed is None:
            return False
        if removed.file_removed == "s3" and self.files is not None:
            try:
                await self.files.delete(removed.sha256)
            except FileStorageError as exc:  # an orphan object, by hash: harmless, logged
                log.warning("kb_file_delete_failed", sha256=removed.sha256, error=str(exc))
        return True

    # --- retrieval -------------------------------------------------------------------------

    # --- scope: which knowledge bases a chat searches --------------------------------------

    async def scope(self, key: SessionKey, *, extra: Sequence[str] = ()) -> list[KnowledgeBase]:
        """What a turn in ``key`` searches: the thread's documents, the chat's, every
        operator base assigned to the chat, and ``default`` (unless it applies only where
        assigned). Never another chat's or thread's."""
        names = [thread_kb(key), chat_kb(key), *extra]
        if self.settings.default_everywhere:
            names.append(DEFAULT_KB)
        chat = Chat.of(key)
        return await self.store.scope_kbs(
            names, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def assign(self, kb: str, chat: Chat) -> bool:
        """Assign the knowledge base ``kb`` (created if new) to ``chat``; ``False`` when it
        already was."""
        base = await self.kb(kb)
        return await self.store.assign(
            base, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def unassign(self, kb: str, chat: Chat) -> bool:
        return await self.store.unassign(
            kb, platform=chat.platform, scope=chat.scope, chat_id=chat.chat_id
        )

    async def search(self, query: str, *, kbs: Sequence[str], limit: int = 5) -> SearchResult:
        """Search the knowledge bases named ``kbs`` (operators' search)."""
        started = time.perf_counter()
        return await self._search(
            query, await self._known(lambda: self.store.kbs(kbs)), limit, started
        )

    async def search_in(self, key: SessionKey, query: str, *, limit: int = 5) -> SearchResult:
        """Search what a turn in ``key`` may read (``scope``): the retriever of turns and of
        the ``search_knowledge`` tool."""
        started = time.perf_counter()
        return await self._search(query, await self._known(lambda: self.scope(key)), limit, started)

    async def _known(
        self, load: Callable[[], Awaitable[list[KnowledgeBase]]]
    ) -> list[KnowledgeBase]:
        """``load()``, skipped while no knowledge base exists at all (no lookup per
        turn on a gateway without documents; believed for ``NO_BASES_SECONDS``)."""
        if time.monotonic() < self._no_bases_until:
            return []
        found = await load()
        if not found and not await self.store.any_kb():
            self._no_bases_until = time.monotonic() + NO_BASES_SECONDS
        return found

    async def _search(
        self, query: str, bases: Sequence[KnowledgeBase], limit: int, started: float
    ) -> SearchResult:
        timings: dict[str, float] = {}
        vector: list[float] | None = None
        same_model = [b.id for b in bases if b.embedding_model == self.embedder.model]
        if same_model and await self.store.vector_enabled():
            t = time.perf_counter()
            vector = (await self.embedder.embed([query]))[0]
            timings["embed_ms"] = round((time.perf_counter() - t) * 1000, 2)
        t = time.perf_counter()
        hits = await self.store.search(
            query,
            kb_ids=[b.id for b in bases],
            vector=vector,
            vector_kb_ids=same_model,
            candidates=self.settings.candidates,
            limit=limit,
        )
        timings["search_ms"] = round((time.perf_counter() - t) * 1000, 2)
        timings["total_ms"] = round((time.perf_counter() - started) * 1000, 2)
        return SearchResult(
            query=query,
            hits=tuple(hits),
            mode="hybrid" if vector is not None else "lexical",
            timings_ms=timings,
        )

    async def prepare_turn(
        self,
        key: SessionKey,
        target: ReplyTarget,
        question: MessageRecord,
        pending: Sequence[MessageRecord],
        *,
        transport: object,
        token_budget: int,
        wait_seconds: float,
        bases: Sequence[str] = (),
    ) -> TurnKnowledge | None:
        """The turn scheduler's one call: files shared with these messages go into the
        thread's knowledge base (a bounded wait for them to be read), then passages for the
        question within ``token_budget``. A failure here never fails the turn: it is answered
        without them."""
        try:
            notes: list[str] = []
            parts: list[dict[str, Any]] = []
            # audio is heard (transcribed), not read as a document
            shared = [a for a in shared_files(pending) if not is_audio(a)]
            # a runtime protocol check is slow: only when files were shared
            source = transport if shared and isinstance(transport, FileSource) else None
            if shared and self.settings.inline_files:
                parts, notes, shared = await self.inline_files(shared, source)
            if shared:
                notes += await self.take_attachments(
                    key, target, shared, source, wait_seconds=wait_seconds
                )
            found = await self.for_turn(
                key, question.content, token_budget=token_budget, notes=notes, bases=bases
            )
            if not parts:
                return found
            if found is None:
                return TurnKnowledge(passages=(), prompt="", trace={}, parts=tuple(parts))
            return replace(found, parts=tuple(parts))
        except (StoreError, EmbeddingError) as exc:
            log.warning("kb_retrieval_failed", error=str(exc))
            return None

    async def for_turn(
        self,
        key: SessionKey,
        question: str,
        *,
        token_budget: int,
        notes: Sequence[str] = (),
        bases: Sequence[str] = (),
    ) -> TurnKnowledge | None:
        """Passages for a question asked in ``key``, within ``token_budget`` tokens; ``None``
        when nothing relevant is found (or nothing fits) and there is nothing to tell.
        ``bases``: knowledge bases the place's profile searches besides ``scope(key)``."""
        if not question.strip():
            return (
                TurnKnowledge(passages=(), prompt="", trace={}, notes=tuple(notes))
                if notes
                else None
            )
        found_bases = await self._known(lambda: self.scope(key, extra=bases))
        if not found_bases and not notes:
            return None  # nothing to search and nothing to tell (no estimates)
        result = await self._search(
            question, found_bases, max(self.settings.passages * 2, 10), time.perf_counter()
        )
        s = self.settings
        relevant = [
            h
            for h in result.hits
            if h.lexical_rank is not None or (h.vector_score or 0.0) >= s.min_vector_score
        ]
        # a question about whole documents may use all that is left of the prompt
        whole = await self._whole(question, relevant, token_budget)
        if whole is not None:
            chosen, lines = list(whole.passages), [whole.header, *whole.summary_lines()]
            lines += [_block(n, h) for n, h in enumerate(chosen, start=1)]
            used = sum(estimate_text(line) + 2 for line in lines)
        else:
            chosen, lines, used = self._best(relevant, min(token_budget, s.max_prompt_tokens))
        trace = {
            "query": question,
            "mode": result.mode,
            "scopes": [b.name for b in found_bases],
            "candidates": [_trace_hit(h) for h in result.hits],
            "chosen": [h.chunk_id for h in chosen],
            "prompt_tokens": used if chosen else 0,
            "timings_ms": dict(result.timings_ms),
        }
        if whole is not None:
            trace["whole"] = {
                "mode": whole.mode,
                "documents": list(dict.fromkeys(h.document_id for h in chosen)),
                "summaries": [name for name, _ in whole.summaries],
            }
        if not chosen and (whole is None or not whole.summaries):
            if notes:
                return TurnKnowledge(passages=(), prompt="", trace=trace, notes=tuple(notes))
            return None
        # counted when cited (``count_access`` after the answer), not when offered
        return TurnKnowledge(
            passages=tuple(chosen), prompt="\n\n".join(lines), trace=trace, notes=tuple(notes)
        )

    def _best(
        self, relevant: Sequence[PassageHit], budget: int
    ) -> tuple[list[PassageHit], list[str], int]:
        """The best passages that fit ``budget``, at most ``passages`` of them, numbered."""
        chosen: list[PassageHit] = []
        lines = [PROMPT_HEADER]
        used = estimate_text(PROMPT_HEADER)
        for hit in relevant:
            if len(chosen) >= self.settings.passages:
                break
            block = _block(len(chosen) + 1, hit)
            cost = estimate_text(block) + 2
            if used + cost > budget:
                continue
            chosen.append(hit)
            lines.append(block)
            used += cost
        return chosen, lines, used

    async def _whole(
        self, question: str, relevant: Sequence[PassageHit], token_budget: int
    ) -> Chosen | None:
        """Whole documents for a question about whole documents (``gateway.knowledge.whole``);
        ``None`` for an ordinary question."""
        docs = whole_documents(question, relevant)
        if not docs:
            return None
        everything = [as_hit(r) for r in await self.store.whole.passages(docs)]
        cost = {h.chunk_id: estimate_text(_block(999, h)) + 2 for h in everything}
        room = token_budget - estimate_text(SUMMARY_HEADER) - 2
        fits = sum(cost.values()) <= room
        summaries = {} if fits else await self.store.summaries.of(docs)
        return choose(
            everything,
            relevant,
            budget=room,
            cost=cost,
            summaries=summaries,
            summary_cost=lambda text: estimate_text(text) + 12,
        )

    # --- access counters (off the hot path) ------------------------------------------------

    def count_access(self, hits: Sequence[PassageHit]) -> None:
        for hit in hits:
            self._doc_access[hit.document_id] += 1
            self._chunk_access[hit.chunk_id] += 1

    async def flush_access(self) -> None:
        if not self._doc_access and not self._chunk_access:
            return
        docs, chunks = dict(self._doc_access), dict(self._chunk_access)
        self._doc_access.clear()
        self._chunk_access.clear()
        try:
            await self.store.count_access(docs, chunks)
        except StoreError:
            self._doc_access.update(docs)
            self._chunk_access.update(chunks)
            raise


def _block(n: int, hit: PassageHit) -> str:
    """A passage as the prompt numbers it: ``[n] name, p. 3 — Section`` and its text."""
    label = source_label({"document_name": hit.document_name, **_loc(hit)})
    return f"[{n}] {label}\n{hit.content}"


__all__ = [
    "DEFAULT_KB",
    "Chat",
    "FileRejected",
    "Knowledge",
    "KnowledgeSettings",
    "SearchResult",
    "TurnKnowledge",
    "build_embedder",
]
