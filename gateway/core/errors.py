"""One exception tree. Foreign errors are translated once, at the boundary that meets them."""

from __future__ import annotations

# the root of the tree and the store's own errors live in the store, the lowest layer; they
# are re-exported here so the core and the adapters import every error from one place
from session_store.errors import (
    GatewayError,
    LeaseLost,
    MigrationError,
    RequestError,
    SessionNotFound,
    StoreError,
)

__all__ = [
    "AgentError",
    "ConfigError",
    "ContextTooSmall",
    "DeliveryError",
    "GatewayError",
    "LeaseLost",
    "MigrationError",
    "RequestError",
    "SessionNotFound",
    "StoreError",
]


class ConfigError(GatewayError):
    """A bad or contradictory setting. ``setting`` names it; start-up exits with code 2."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


class DeliveryError(GatewayError):
    """A send failed. ``permanent`` failures are not retried; ``retry_after`` is the
    platform's own wait in seconds (Telegram ``retry_after``, HTTP ``Retry-After``).
    ``ambiguous`` means the platform may have posted it anyway (timeout after the request
    left), so a blind retry could double-post."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
        ambiguous: bool = False,
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after
        self.ambiguous = ambiguous


class AgentError(GatewayError):
    """The agent failed to produce an answer (timeout, connection error, 4xx/5xx).
    ``status`` is the HTTP status the agent's server answered, when it answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ContextTooSmall(AgentError):
    """Even the newest turn, shortened, does not fit the model's context window."""
