"""The knowledge base as the gateway uses it, composed of the objects it holds, each with the
state it owns: the catalog of knowledge bases (``catalog.py``), file intake (``shared.py``),
retrieval (``retrieval.py``), the turn's knowledge (``turn.py``), and the job worker that reads
queued files (``ingest.py``: parse -> chunk -> embed -> ready, three tries with backoff,
claimed across replicas with a lease)."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid

from gateway.core.domain import ReplyTarget
from gateway.core.errors import StoreError
from gateway.core.hub import Signal
from gateway.core.settings import Settings
from gateway.knowledge.catalog import Catalog
from gateway.knowledge.citations import TurnKnowledge
from gateway.knowledge.config import Announce, FileRejected, KnowledgeSettings
from gateway.knowledge.embed import Embedder, LocalEmbedder, RemoteEmbedder
from gateway.knowledge.files import S3Files
from gateway.knowledge.ingest import IngestWorker
from gateway.knowledge.places import DEFAULT_KB, Chat
from gateway.knowledge.retrieval import Retrieval, SearchResult
from gateway.knowledge.shared import FileIntake
from gateway.knowledge.turn import TurnKnowledgeBuilder
from session_store.repos.knowledge import AddedDocument, KnowledgeStore


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedding_base_url:
        key = settings.embedding_api_key
        return RemoteEmbedder(
            settings.embedding_base_url,
            model=settings.embedding_model,
            api_key=key.get_secret_value() if key else None,
        )
    return LocalEmbedder()


class Knowledge:
    """The knowledge base: the shared collaborators (the store, the embedding model, the
    settings, the file store, the wake-up signals) and the parts built on them."""

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
        #: set when a file is queued: the job worker looks for work
        self.wake = wake or Signal()
        #: set when a document is ready: its summary is due (``gateway.knowledge.summaries``)
        self.summary_wake = Signal()
        #: who claims ingest jobs (a lease holder across replicas)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.catalog = Catalog(store, embedder, self.settings, wake=self.wake)
        self.intake = FileIntake(
            store, self.settings, catalog=self.catalog, wake=self.wake, files=files
        )
        self.retrieval = Retrieval(store, embedder, self.settings, catalog=self.catalog)
        self.turns = TurnKnowledgeBuilder(
            store,
            self.settings,
            catalog=self.catalog,
            intake=self.intake,
            retrieval=self.retrieval,
        )
        self.worker = IngestWorker(self)

    async def add(
        self,
        name: str,
        data: bytes,
        *,
        kb: str = DEFAULT_KB,
        media_type: str | None = None,
        notify_target: ReplyTarget | None = None,
    ) -> AddedDocument:
        """Store a file and queue its ingest (``FileIntake.add``, kept here because the admin
        API, MCP, the CLI, the worker and the tests all add files)."""
        return await self.intake.add(
            name, data, kb=kb, media_type=media_type, notify_target=notify_target
        )

    async def process_one(self) -> bool:
        """Run one due job; ``False`` when there was none (``IngestWorker.process_one``, kept
        here for the CLI's ``--wait`` and the tests)."""
        return await self.worker.process_one()

    async def aclose(self) -> None:
        with contextlib.suppress(StoreError):
            await self.turns.flush_access()
        await self.embedder.aclose()


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
