from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.knowledge.embed import LocalEmbedder
from gateway.knowledge.service import Knowledge, KnowledgeSettings
from session_store.knowledge import KnowledgeStore
from session_store.store import Store

_LOCAL = LocalEmbedder()  # loaded once per test run


class SharedLocalEmbedder(LocalEmbedder):
    """The local embedder, sharing one loaded model across tests."""

    def __init__(self) -> None:
        super().__init__()
        self._inference = _LOCAL._load()


@pytest.fixture
def kstore(store: Store) -> KnowledgeStore:
    return KnowledgeStore(store.db)


@pytest.fixture
async def knowledge(kstore: KnowledgeStore) -> AsyncIterator[Knowledge]:
    k = Knowledge(
        kstore,
        SharedLocalEmbedder(),
        KnowledgeSettings(lease_seconds=2.0, poll_seconds=0.05, backoff_seconds=0.1),
    )
    yield k
    await k.aclose()


async def drain(k: Knowledge, *, limit: int = 50) -> None:
    """Run jobs until none is due."""
    for _ in range(limit):
        if not await k.process_one():
            return
    raise AssertionError("jobs kept coming")
