"""Retrieval, a part of ``Knowledge`` (``gateway.knowledge.service``): hybrid search (full text,
and vectors where the base was built with this gateway's embedding model) over named
knowledge bases, or over what a turn in a session may read."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.core.domain import SessionKey
from gateway.knowledge.catalog import Catalog
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import Embedder
from session_store.repos.knowledge import KnowledgeBase, KnowledgeStore, PassageHit


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    query: str
    hits: tuple[PassageHit, ...]
    #: which bases were searched, and how: ``lexical`` alone or ``hybrid``
    mode: str
    timings_ms: Mapping[str, float]


class KnowledgeSearch(Protocol):
    """What the ``search_knowledge`` tool needs of the knowledge base: the turn's retriever
    over the turn's scope."""

    async def search_in(self, key: SessionKey, query: str, *, limit: int = 5) -> SearchResult: ...


class Retrieval:
    """Search; it holds no state of its own (the catalog says which bases exist)."""

    def __init__(
        self,
        store: KnowledgeStore,
        embedder: Embedder,
        settings: KnowledgeSettings,
        *,
        catalog: Catalog,
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._settings = settings
        self._catalog = catalog

    async def search(self, query: str, *, kbs: Sequence[str], limit: int = 5) -> SearchResult:
        """Search the knowledge bases named ``kbs`` (operators' search)."""
        started = time.perf_counter()
        bases = await self._catalog.known(lambda: self._store.kbs(kbs))
        return await self.search_bases(query, bases, limit, started=started)

    async def search_in(self, key: SessionKey, query: str, *, limit: int = 5) -> SearchResult:
        """Search what a turn in ``key`` may read (``Catalog.scope``): the retriever of turns
        and of the ``search_knowledge`` tool."""
        started = time.perf_counter()
        bases = await self._catalog.known(lambda: self._catalog.scope(key))
        return await self.search_bases(query, bases, limit, started=started)

    async def search_bases(
        self, query: str, bases: Sequence[KnowledgeBase], limit: int, *, started: float
    ) -> SearchResult:
        timings: dict[str, float] = {}
        vector: list[float] | None = None
        same_model = [b.id for b in bases if b.embedding_model == self._embedder.model]
        if same_model and await self._store.vector_enabled():
            t = time.perf_counter()
            vector = (await self._embedder.embed([query]))[0]
            timings["embed_ms"] = round((time.perf_counter() - t) * 1000, 2)
        t = time.perf_counter()
        hits = await self._store.search(
            query,
            kb_ids=[b.id for b in bases],
            vector=vector,
            vector_kb_ids=same_model,
            candidates=self._settings.candidates,
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
