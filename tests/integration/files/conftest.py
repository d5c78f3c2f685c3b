"""The fake Bot API (testsupport/telegram.py), and the fake model server as the transcription
server (``POST /v1/audio/transcriptions``)."""

from collections.abc import AsyncIterator

import pytest

from testsupport.fakes.openai import FakeOpenAI
from testsupport.telegram import fake  # noqa: F401


@pytest.fixture
async def speech() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()
