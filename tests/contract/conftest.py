"""The contract suite's fixtures: a streaming fake OpenAI-compatible model."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from testsupport.fakes.openai import FakeOpenAI


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI(chunk_delay=0.1, chunk_chars=6).start()
    try:
        yield server
    finally:
        await server.stop()
