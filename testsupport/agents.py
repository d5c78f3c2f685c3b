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


class GatedEcho:
    """Echoes the newest message; one saying ``hold`` waits until released, so what is posted
    meanwhile waits as a queued turn. Every turn is kept, its context readable."""

    name = "gated-echo"

    def __init__(self) -> None:
        self.turns: list[Turn] = []
        self.release = asyncio.Event()

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.turns.append(turn)
        text = turn.new_messages[-1].content
        if "hold" in text:
            await self.release.wait()
        return [Reply(text=f"echo: {text}")]

    def asked(self) -> list[str]:
        """The new messages of every turn, in order."""
        return [m.content for t in self.turns for m in t.new_messages]
