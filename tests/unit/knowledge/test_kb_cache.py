"""The knowledge bases a process remembers are bounded: every thread that shares a file has a
base of its own, and a long run must not keep one entry per thread ever seen."""

from __future__ import annotations

import pytest

from gateway.knowledge import catalog
from gateway.knowledge.service import Knowledge


async def test_remembered_bases_are_bounded_and_the_rest_read_again(
    knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "MAX_CACHED_KBS", 3)
    for n in range(10):
        await knowledge.catalog.kb(f"thread:sink:test:c:t{n}")
    assert len(knowledge.catalog._kbs) == 3
    again = await knowledge.catalog.kb("thread:sink:test:c:t0")  # forgotten, read again
    assert again.name == "thread:sink:test:c:t0" and len(knowledge.catalog._kbs) == 3
