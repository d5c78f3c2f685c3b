"""Helpers for end-to-end tests: run a real Gateway (real store, real workers, real HTTP
server on an ephemeral port) against a test database, and wait for conditions with a
deadline instead of sleeping.

Usage::

    async with running_gateway(database_url, adapters=[my_adapter]) as gw:
        ...  # gw.url, gw.store, gw.intake, gw.metrics
        await wait_for(lambda: fake.sent_messages(), timeout=10)
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar, overload

from gateway.agents import Agent, EchoAgent
from gateway.ports import PlatformAdapter
from gateway.runtime import Gateway
from gateway.settings import Settings
from session_store.store import Store

T = TypeVar("T")


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for a test: nothing from the environment or a .env file, fast polling."""
    values: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "GATEWAY_HTTP_PORT": 0,
        "GATEWAY_POLL_SECONDS": 0.2,
        "GATEWAY_LEASE_SECONDS": 5.0,
        "GATEWAY_TURN_WORKERS": 4,
        "GATEWAY_DELIVERY_WORKERS": 4,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def running_gateway(
    database_url: str,
    *,
    adapters: Sequence[PlatformAdapter] = (),
    agent: Agent | None = None,
    web_chat: bool = True,
    **settings_overrides: Any,
) -> AsyncIterator[Gateway]:
    settings = make_settings(database_url, GATEWAY_WEB_CHAT=web_chat, **settings_overrides)
    store = await Store.connect(database_url, min_size=1, max_size=10)
    gateway = Gateway(settings, store=store, agent=agent or EchoAgent(), adapters=list(adapters))
    try:
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.stop()
    finally:
        await store.close()


@overload
async def wait_for(
    condition: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


async def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition not met",
) -> Any:
    """Poll ``condition`` (sync or async) until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {message}")
        await asyncio.sleep(interval)
