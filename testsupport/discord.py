"""Helpers for the Discord surface's tests: an adapter wired to the fake Discord, and a wait
for its gateway session to be up and caught up."""

from __future__ import annotations

from typing import Any

from adapters.discord.adapter import DiscordAdapter, DiscordConfig
from testsupport.fakes.discord import FakeDiscord
from testsupport.harness import wait_for


def make_config(fake: FakeDiscord, **overrides: Any) -> DiscordConfig:
    values: dict[str, Any] = {
        "token": fake.token,
        "api_base_url": fake.api_url,
        "http_timeout": 5.0,
        "tick_interval": 0.05,
        "trust_env": False,  # never the developer's proxy settings
    }
    values.update(overrides)
    return DiscordConfig(**values)


def discord_env(fake: FakeDiscord) -> dict[str, str]:
    """The settings a ``gateway run`` needs to reach the fake."""
    return {"DISCORD_BOT_TOKEN": fake.token, "DISCORD_API_BASE_URL": fake.api_url}


async def session_up(adapter: DiscordAdapter, fake: FakeDiscord, sessions: int = 1) -> None:
    """The ``sessions``-th gateway session is ready and its catch-up done (what a test posts
    next arrives live)."""
    await wait_for(
        lambda: (
            fake.live and adapter.sessions >= sessions and adapter.reconciler.catch_ups >= sessions
        ),
        timeout=20,
        message=f"{sessions} Discord gateway session(s)",
    )
