"""What a network agent reports about each model it asks, and asks before it does.

``ModelHealth`` is the agent's view of the per-model circuit breakers and the model metrics
(``gateway.agents.breakers.SharedBreakers`` in a gateway: PostgreSQL-backed, shared by every
replica). An agent built alone (tests, tools) gets ``NoHealth``: every model is available and
nothing is recorded.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gateway.agents.retry import ProviderFailure


class ModelHealth(Protocol):
    async def available(self, model: str) -> bool:
        """False while ``model``'s breaker is open (the turn goes straight to a fallback);
        True when it is closed, or for the one request that probes an open breaker."""
        ...

    async def failed(self, model: str, failure: ProviderFailure) -> None:
        """One request to ``model`` failed (counted towards opening its breaker)."""
        ...

    async def succeeded(self, model: str) -> None:
        """``model`` answered (its breaker closes)."""
        ...

    def skipped(self, model: str) -> None:
        """A turn passed ``model`` by because its breaker is open."""
        ...

    def waited(self, model: str, seconds: float) -> None:
        """A turn waited ``seconds`` before retrying ``model``."""
        ...


@runtime_checkable
class Guarded(Protocol):
    """An agent that consults a ``ModelHealth`` (the composition root sets it)."""

    health: ModelHealth


class NoHealth:
    async def available(self, model: str) -> bool:
        return True

    async def failed(self, model: str, failure: ProviderFailure) -> None:
        return None

    async def succeeded(self, model: str) -> None:
        return None

    def skipped(self, model: str) -> None:
        return None

    def waited(self, model: str, seconds: float) -> None:
        return None
