"""One exception tree. Foreign errors are translated once, at the boundary that meets them."""

from __future__ import annotations

from collections.abc import Sequence

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
    "ConfigErrors",
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

    @property
    def each(self) -> list[ConfigError]:
        """The problems this error names: itself, or each of ``ConfigErrors``."""
        return [self]

    @staticmethod
    def of(found: Sequence[ConfigError]) -> ConfigError:
        """One error for all of ``found`` (at least one): itself when alone."""
        problems = [one for error in found for one in error.each]
        return problems[0] if len(problems) == 1 else ConfigErrors(problems)


class ConfigErrors(ConfigError):
    """Several bad settings or config file entries, named in one message, so that one run
    shows everything to fix; ``setting`` is the first. Start-up exits with code 2."""

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        lines = "\n".join(f"  {error}" for error in errors)
        GatewayError.__init__(self, f"{len(errors)} problems:\n{lines}")
        self.setting = errors[0].setting
        self.errors = list(errors)

    @property
    def each(self) -> list[ConfigError]:
        return list(self.errors)


class DeliveryError(GatewayError):
    """A send failed. ``permanent`` failures are not retried; ``retry_after`` is the
    platform's own wait in seconds (Telegram ``retry_after``, HTTP ``Retry-After``).
    ``ambiguous`` means the platform may have posted it anyway (timeout after the request
    left), so a blind retry could double-post.

    ``hold``: the keys of the transport's own pace rules (``Transport.pace``) that the wait
    applies to beyond this one send: a limit of the whole bot (a global 429) holds
    its bot-wide key, a route's limit the route's key. The outbox closes them for
    ``retry_after`` in every replica, so every other send under them waits too instead of
    running into the same 429."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool = False,
        retry_after: float | None = None,
        ambiguous: bool = False,
        hold: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.retry_after = retry_after
        self.ambiguous = ambiguous
        self.hold = hold


class AgentError(GatewayError):
    """The agent failed to produce an answer (timeout, connection error, 4xx/5xx).
    ``status`` is the HTTP status the agent's server answered, when it answered."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ContextTooSmall(AgentError):
    """Even the newest turn, shortened, does not fit the model's context window."""
