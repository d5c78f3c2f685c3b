"""Fixtures for the Teams tests: the fake Bot Framework, settings pointing at it, and a gateway
whose Teams adapter receives from it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.teams.adapter import TeamsAdapter
from adapters.teams.settings import TeamsSettings
from gateway.agents.base import Agent
from gateway.runtime.gateway import Gateway
from testsupport.fakes.teams import FakeTeams
from testsupport.harness import running_gateway


def teams_settings(fake: FakeTeams, **overrides: Any) -> TeamsSettings:
    """Settings built explicitly (no environment, no .env file)."""
    values: dict[str, Any] = {**fake.env(), **overrides}
    return TeamsSettings(_env_file=None, **values)  # type: ignore[call-arg]


def teams_adapter(fake: FakeTeams, **overrides: Any) -> TeamsAdapter:
    # no wait between two fetches of the keys: the tests rotate them at will
    return TeamsAdapter(teams_settings(fake, **overrides), key_refetch_interval=0.0)


@pytest.fixture
async def fake() -> AsyncIterator[FakeTeams]:
    async with FakeTeams() as server:
        yield server


@asynccontextmanager
async def teams_gateway(
    database_url: str,
    fake: FakeTeams,
    *,
    agent: Agent | None = None,
    adapter: TeamsAdapter | None = None,
    **settings: Any,
) -> AsyncIterator[Gateway]:
    async with running_gateway(
        database_url,
        adapters=[adapter or teams_adapter(fake)],
        agent=agent,
        web_chat=False,
        **settings,
    ) as gw:
        fake.messages_url = f"{gw.url}teams/messages"
        yield gw
