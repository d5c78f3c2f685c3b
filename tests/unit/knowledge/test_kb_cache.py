"""The knowledge bases a process remembers are bounded: every thread that shares a file has a
base of its own, and a long run must not keep one entry per thread ever seen."""

from __future__ import annotations

import pytest

from gateway.knowledge import catalog
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import KnowledgeBase


async def test_remembered_bases_are_bounded_and_the_rest_read_again(
    knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "MAX_CACHED_KBS", 3)
    for n in range(10):
        await knowledge.catalog.kb(f"thread:sink:test:c:t{n}")
    assert len(knowledge.catalog._kbs) == 3
    again = await knowledge.catalog.kb("thread:sink:test:c:t0")  # forgotten, read again
    assert again.name == "thread:sink:test:c:t0" and len(knowledge.catalog._kbs) == 3


async def test_a_chat_without_bases_asks_once_whether_any_exists_while_one_does(
    knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where some base exists but none for this chat, each turn asked again whether any
    exists: a second transaction per turn. The answer is believed for ``NO_BASES_SECONDS``."""
    await knowledge.catalog.kb("elsewhere")
    store = knowledge.catalog._store
    asked: list[bool] = []
    any_kb = store.any_kb

    async def counted() -> bool:
        asked.append(await any_kb())
        return asked[-1]

    monkeypatch.setattr(store, "any_kb", counted)

    async def nothing_here() -> list[KnowledgeBase]:
        return []

    for _ in range(5):
        assert await knowledge.catalog.known(nothing_here) == []
    assert asked == [True]
