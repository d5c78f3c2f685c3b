"""The platform fakes, Slack and Telegram at once; the transcription server is the root
conftest's ``speech``."""

from collections.abc import AsyncIterator

import pytest

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
