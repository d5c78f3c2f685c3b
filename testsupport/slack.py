"""Fixtures for the Slack tests: the fake Slack, settings pointing at it, a recording Intake
(stage 1: what the adapter hands the core), and the adapter's routes served over real HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette

from adapters.slack import SlackAdapter
from adapters.slack.settings import SlackSettings
from gateway.http.app import HttpServer
from testsupport.fakes.slack import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack
from testsupport.harness import RecordingIntake
from testsupport.paths import PAYLOADS


def load_payload(name: str) -> dict[str, Any]:
    data = json.loads((PAYLOADS / name).read_text())
    assert isinstance(data, dict)
    return data


def slack_settings(fake: FakeSlack | None = None, **overrides: Any) -> SlackSettings:
    """Settings built explicitly (no environment, no .env file)."""
    values: dict[str, Any] = {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_BASE_URL": fake.api_url if fake else "http://127.0.0.1:9/api/",
        "GATEWAY_WEB_CHAT": False,
    }
    values.update(overrides)
    return SlackSettings(_env_file=None, **values)  # type: ignore[call-arg]


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
