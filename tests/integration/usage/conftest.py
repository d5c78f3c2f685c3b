"""Fixtures for usage and budgets: the fake OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from testsupport.fakes.openai import FakeOpenAI


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()
