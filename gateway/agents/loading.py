"""``AGENT``: which agent answers. ``echo`` (default), ``openai``, ``http``, or ``module:callable``
for an agent written in Python."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gateway.agents.base import Agent, EchoAgent
from gateway.core.errors import ConfigError

if TYPE_CHECKING:
    from gateway.core.settings import Settings


def load_agent(spec: str, settings: Settings | None = None) -> Agent:
    """Resolve the ``AGENT`` setting into an agent instance (``openai`` and ``http`` read
    their options from ``settings``)."""
    if spec == "echo":
        return EchoAgent()
    if spec in ("openai", "http"):
        if settings is None:
            raise ConfigError("AGENT", f"AGENT={spec} needs the settings")
        from gateway.agents.http import HttpAgent
        from gateway.agents.openai import OpenAIAgent

        if spec == "openai":
            return OpenAIAgent.from_settings(settings)
        return HttpAgent.from_settings(settings)
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
