"""The agent port and the built-in agents. ``AGENT`` picks one: ``echo`` (default),
``module:callable`` for an agent in Python. (``openai`` and ``http`` are built in
``gateway.agent_clients``.)"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gateway.domain import Reply, ReplyTarget, SessionKey
from gateway.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextMessage:
    seq_no: int
    role: str
    content: str
    sender_name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """What an agent sees: this session's own context only, oldest first, and which of those
    messages are new since the last answer. ``target`` says where the answer will land."""

    session_id: int
    key: SessionKey
    target: ReplyTarget
    context: Sequence[ContextMessage]
    new_messages: Sequence[ContextMessage]
    selected_model: str | None = None


@runtime_checkable
class Agent(Protocol):
    name: str

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        """Answer a turn. Raise ``AgentError`` for a failure worth telling the user about."""
        ...


class EchoAgent:
    """Zero-config agent: answers with the newest message's text."""

    name = "echo"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        if not turn.new_messages:
            return []
        return [Reply(text=f"echo: {turn.new_messages[-1].content}", model="echo")]


def load_agent(spec: str) -> Agent:
    """Resolve the ``AGENT`` setting into an agent instance."""
    if spec == "echo":
        return EchoAgent()
    if ":" not in spec:
        raise ConfigError("AGENT", f"unknown agent {spec!r}")
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("AGENT", f"cannot load {spec!r}: {exc}") from exc
    agent = factory() if isinstance(factory, type) or not isinstance(factory, Agent) else factory
    if not isinstance(agent, Agent):
        raise ConfigError("AGENT", f"{spec!r} did not produce an agent (needs name and respond)")
    return agent
