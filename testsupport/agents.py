"""Agents for process-level tests, loadable with AGENT=testsupport.agents:<name>."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.agents.base import Turn
from gateway.core.domain import Reply


class SlowAgent:
    """Never finishes in time: lets a test kill the process in the middle of a turn."""

    name = "slow"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        await asyncio.sleep(3600)
        return []


class FailingAgent:
    name = "failing"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        raise RuntimeError("model server unreachable")
