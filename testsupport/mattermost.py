"""Fixtures for the Mattermost adapter: the fake server, a recording intake, adapters wired
to the fake, and a deadline-based wait helper (no sleep-then-assert)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from adapters.mattermost.adapter import MattermostAdapter, MattermostConfig
from adapters.mattermost.websocket import Backoff
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import RecordingIntake
from testsupport.paths import PAYLOADS

FAST_BACKOFF = Backoff(initial=0.02, maximum=0.1, stable_after=60.0)


def load_payload(name: str) -> dict[str, Any]:
    data = json.loads((PAYLOADS / name).read_text())
    assert isinstance(data, dict)
    return data


async def wait_until(
    predicate: Callable[[], bool], *, timeout: float = 5.0, message: str = "condition"
) -> None:
    """Poll ``predicate`` until it holds; fail the test at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def fake() -> AsyncIterator[FakeMattermost]:
    async with FakeMattermost() as server:
        yield server


def make_config(fake: FakeMattermost, **overrides: Any) -> MattermostConfig:
    values: dict[str, Any] = {
        "url": fake.url,
        "token": fake.bot.token,
        "backoff": FAST_BACKOFF,
        "hello_timeout": 2.0,
        "http_timeout": 5.0,
        "tick_interval": 0.05,
        "trust_env": False,  # never the developer's proxy settings
    }
    values.update(overrides)
    return MattermostConfig(**values)


@pytest.fixture
async def running() -> AsyncIterator[Callable[..., Any]]:
    """``await running(adapter, intake)`` starts an adapter and stops it after the test."""
    started: list[MattermostAdapter] = []

    async def start(adapter: MattermostAdapter, intake: RecordingIntake) -> MattermostAdapter:
        await adapter.start(intake)
        started.append(adapter)
        return adapter

    yield start
    for adapter in started:
        await adapter.stop()


async def connected(adapter: MattermostAdapter, count: int = 1) -> None:
    """Wait for the ``count``-th connection to be up *and* reconciled (so what a test posts
    next arrives as a live event, not through the reconciliation racing it)."""
    await wait_until(
        lambda: (
            adapter.stream is not None
            and adapter.stream.connected
            and adapter.stream.connections >= count
            and adapter.reconciler.reconciliations >= count
        ),
        message=f"{count} reconciled websocket connection(s)",
    )
