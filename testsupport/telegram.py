"""Fixtures for the Telegram adapter: the fake Bot API server, a recording Intake, settings
that point at the fake, and a started adapter."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.settings import TelegramSettings
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import RecordingIntake
from testsupport.paths import PAYLOADS


def load_payload(name: str, *, update_id: int = 1) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / name).read_text(encoding="utf-8"))
    if data.get("update_id") is None:
        # the capture showed only the Message; PTB and we need an integer (SOURCES.md)
        data["update_id"] = update_id
    return data


def telegram_settings(fake: FakeTelegram, **overrides: Any) -> TelegramSettings:
    values: dict[str, Any] = {
        "TELEGRAM_BOT_TOKEN": fake.token,
        "TELEGRAM_API_BASE_URL": fake.base_url,
    }
    values.update(overrides)
    # _env_file=None: never read a developer's .env
    return TelegramSettings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
def intake() -> RecordingIntake:
    return RecordingIntake()


AdapterFactory = Callable[..., Awaitable[TelegramAdapter]]


@pytest.fixture
async def start_adapter(
    fake: FakeTelegram, intake: RecordingIntake
) -> AsyncIterator[AdapterFactory]:
    """``await start_adapter(**settings_overrides)``: a started adapter with fast polling."""
    started: list[TelegramAdapter] = []

    async def factory(
        *, intake_: RecordingIntake | None = None, start: bool = True, **overrides: Any
    ) -> TelegramAdapter:
        adapter = TelegramAdapter(
            telegram_settings(fake, **overrides),
            poll_timeout=1,
            backoff_initial=0.02,
            backoff_max=0.2,
            stop_timeout=2.0,
        )
        started.append(adapter)
        if start:
            await adapter.start(intake_ or intake)
        return adapter

    yield factory
    for adapter in started:
        await adapter.stop()


@contextlib.asynccontextmanager
async def serve_http(app: Starlette) -> AsyncIterator[str]:
    """Run ``app`` under uvicorn on 127.0.0.1:<ephemeral>; yields its base URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", ws="none"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(), name="test-uvicorn")
    try:
        deadline = asyncio.get_running_loop().time() + 5
        while not server.started:
            if task.done() or asyncio.get_running_loop().time() > deadline:
                raise RuntimeError("uvicorn did not start")
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, timeout=5)
