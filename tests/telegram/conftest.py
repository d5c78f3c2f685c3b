"""Fixtures for the Telegram adapter: the fake Bot API server, a recording Intake, settings
that point at the fake, and a started adapter."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette

from adapters.telegram.adapter import TelegramAdapter
from benchmarks.fakes.telegram import FakeTelegram
from gateway.domain import Envelope, Extracted, SessionKey
from gateway.ports import IngestOutcome
from gateway.settings import Settings

PAYLOADS = Path(__file__).parents[1] / "payloads"  # copies of shared/payloads


def load_payload(name: str, *, update_id: int = 1) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PAYLOADS / name).read_text(encoding="utf-8"))
    if data.get("update_id") is None:
        # the capture showed only the Message; PTB and we need an integer (SOURCES.md)
        data["update_id"] = update_id
    return data


class RecordingIntake:
    """Implements the ``Intake`` protocol and records what the adapter submitted.

    ``fail_first`` makes the first N submits raise (a database outage); ``gate`` makes
    every submit wait for it (to observe the adapter while a submit is in flight)."""

    def __init__(self, *, fail_first: int = 0) -> None:
        self.submitted: list[tuple[Extracted, Mapping[str, Any] | None]] = []
        self.attempts = 0
        self.fail_first = fail_first
        self.gate: asyncio.Event | None = None
        self.in_submit = 0
        self.cursors: dict[str, str] = {}

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        self.attempts += 1
        self.in_submit += 1
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.attempts <= self.fail_first:
                raise RuntimeError("database is down (test)")
            self.submitted.append((extracted, raw))
        finally:
            self.in_submit -= 1
        status = "accepted" if isinstance(extracted, Envelope) else type(extracted).__name__
        return IngestOutcome(status=status.lower())

    async def lead(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        await body()  # one process: it always leads

    async def knows(self, key: SessionKey) -> bool:
        return False

    async def load_cursor(self, name: str) -> str | None:
        return self.cursors.get(name)

    async def save_cursor(self, name: str, value: str) -> None:
        self.cursors[name] = value

    @property
    def extracted(self) -> list[Extracted]:
        return [e for e, _ in self.submitted]

    @property
    def envelopes(self) -> list[Envelope]:
        return [e for e, _ in self.submitted if isinstance(e, Envelope)]


def telegram_settings(fake: FakeTelegram, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "TELEGRAM_BOT_TOKEN": fake.token,
        "TELEGRAM_API_BASE_URL": fake.base_url,
    }
    values.update(overrides)
    # _env_file=None: never read a developer's .env
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


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
