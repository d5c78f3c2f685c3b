"""Fixtures for the operator surface: a recording sink server behind the sink surface."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.plugins.sink_server import SinkServer


@pytest.fixture
async def sink() -> AsyncIterator[SinkServer]:
    server = await SinkServer().start()
    try:
        yield server
    finally:
        await server.stop()
