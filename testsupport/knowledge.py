from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import LocalEmbedder
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import KnowledgeStore
from session_store.store import Store

_LOCAL = LocalEmbedder()  # loaded once per test run


@pytest.fixture(scope="session", autouse=True)
def _embedder_loaded() -> None:
    """Load the model (and import its libraries) before the first test here, as a serial run
    had mostly done by the time it reached this directory. A gateway under test builds its own
    LocalEmbedder; its first load in a fresh (xdist worker) process imports those libraries in
    a thread, and on a busy machine that starved the event loop past a 5 s turn lease. The
    document parsers' libraries likewise (imported on a file's first parse)."""
    import docx  # noqa: F401
    import pypdf  # noqa: F401

    _LOCAL._load()


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
