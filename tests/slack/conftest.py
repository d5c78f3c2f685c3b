"""Fixtures for the Slack tests: the fake Slack, settings pointing at it, a recording Intake
(stage 1: what the adapter hands the core), and the adapter's routes served over real HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from adapters.slack import SlackAdapter
from benchmarks.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from gateway.domain import Envelope, Extracted, Ignored, Rejected, SessionKey
from gateway.http import HttpServer
from gateway.ports import IngestOutcome
from gateway.settings import Settings

PAYLOADS = Path(__file__).parents[1] / "payloads"  # copies of shared/payloads


def load_payload(name: str) -> dict[str, Any]:
    data = json.loads((PAYLOADS / name).read_text())
    assert isinstance(data, dict)
    return data


def slack_settings(fake: FakeSlack | None = None, **overrides: Any) -> Settings:
    """Settings built explicitly (no environment, no .env file)."""
    values: dict[str, Any] = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_BASE_URL": fake.api_url if fake else "http://127.0.0.1:9/api/",
        "GATEWAY_WEB_CHAT": False,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@dataclass
class Submitted:
    extracted: Extracted
    raw: Mapping[str, Any] | None
    returned_at: float  # time.monotonic() when submit returned


class RecordingIntake:
    """Implements the core's ``Intake`` and records every call; dedupes nothing (stage 1)."""

    def __init__(self) -> None:
        self.submitted: list[Submitted] = []
        self.known: set[SessionKey] = set()
        self.knows_calls: list[SessionKey] = []
        self.delay = 0.0  # simulated slow store
        self.delays: list[float] = []  # per-call delays, consumed first
        self.fail_next = 0
        self.cursors: dict[str, str] = {}

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        delay = self.delays.pop(0) if self.delays else self.delay
        if delay:
            await asyncio.sleep(delay)  # the store taking its time, not a wait-for-condition
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("store unavailable")
        self.submitted.append(Submitted(extracted, raw, time.monotonic()))
        if isinstance(extracted, Envelope):
            self.known.add(extracted.key)
            return IngestOutcome(status="accepted", session_id=1, seq_no=len(self.submitted))
        if isinstance(extracted, Rejected):
            return IngestOutcome(status="rejected", reason=extracted.reason)
        return IngestOutcome(status="ignored", reason=extracted.reason)

    async def lead(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        await body()  # one process: it always leads

    async def knows(self, key: SessionKey) -> bool:
        self.knows_calls.append(key)
        return key in self.known

    async def load_cursor(self, name: str) -> str | None:
        return self.cursors.get(name)

    async def save_cursor(self, name: str, value: str) -> None:
        self.cursors[name] = value

    # --- views for assertions
    @property
    def envelopes(self) -> list[Envelope]:
        return [s.extracted for s in self.submitted if isinstance(s.extracted, Envelope)]

    @property
    def ignored(self) -> list[Ignored]:
        return [s.extracted for s in self.submitted if isinstance(s.extracted, Ignored)]

    @property
    def rejected(self) -> list[Rejected]:
        return [s.extracted for s in self.submitted if isinstance(s.extracted, Rejected)]


@pytest.fixture(autouse=True)
def _no_proxy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """slack_sdk routes every call through HTTP(S)_PROXY from the environment and ignores
    NO_PROXY; a developer's proxy must not intercept calls to the local fake."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        server.add_channel("C0GENERAL")
        server.add_channel("D0DM", kind="im")
        server.add_channel("C0NOBOT", bot_member=False)
        yield server


@pytest.fixture
def intake() -> RecordingIntake:
    return RecordingIntake()


@asynccontextmanager
async def serve_routes(routes: list[Any]) -> AsyncIterator[str]:
    """The adapter's Starlette routes on a real HTTP server; yields the base URL."""
    server = HttpServer(Starlette(routes=routes), "127.0.0.1", 0)
    await server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


@asynccontextmanager
async def running_adapter(
    fake: FakeSlack,
    intake: RecordingIntake,
    *,
    socket_mode: bool = False,
    **overrides: Any,
) -> AsyncIterator[SlackAdapter]:
    """Adapter started against the fake; HTTP mode wires ``fake.events_url`` to it."""
    if socket_mode:
        overrides.setdefault("SLACK_APP_TOKEN", APP_TOKEN)
        fake.mode = "socket"
    adapter = SlackAdapter(slack_settings(fake, **overrides))
    async with serve_routes(list(adapter.http_routes())) as base_url:
        fake.events_url = f"{base_url}/slack/events"
        await adapter.start(intake)
        try:
            yield adapter
        finally:
            await adapter.stop()
