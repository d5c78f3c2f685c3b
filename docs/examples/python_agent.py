"""A Python agent: AGENT=python_agent:CountingAgent, with this file's folder on PYTHONPATH."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.agents.base import Turn
from gateway.core.domain import Reply


class CountingAgent:
    name = "counting"
    uses_tools = False  # never calls tools: no routing, no schema tokens from its budget

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        earlier = len(turn.context) - len(turn.new_messages)
        question = turn.new_messages[-1].content
        return [Reply(text=f"{question!r}, after {earlier} earlier messages in this thread")]
