"""Fixtures for the agent runtime tests: the fake OpenAI-compatible server and the sink."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.agents.fake_openai import FakeOpenAI
from tests.plugins.sink_server import SinkServer


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def sink() -> AsyncIterator[SinkServer]:
    server = await SinkServer().start()
    try:
        yield server
    finally:
        await server.stop()
