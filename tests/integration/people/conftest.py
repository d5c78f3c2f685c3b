"""The platform fakes (Slack and Telegram at once) and the transcription server."""

from collections.abc import AsyncIterator

import pytest

from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.telegram import FakeTelegram


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        server.add_channel("C0GENERAL")
        yield server


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def speech() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()
