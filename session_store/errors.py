"""The store's errors, and the root of the project's one exception tree.

``GatewayError`` lives here, in the lowest layer, so that the store's errors belong to the same
tree as the core's without the store importing the core (``gateway.core.errors`` re-exports these
and adds its own). Driver errors are translated into these in exactly one place:
``session_store.db.translate``.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Root of every error this project raises on purpose."""


class StoreError(GatewayError):
    """The database refused or failed an operation.

    ``transient`` is true when the same call may succeed later without any change on our
    side: the server is unreachable or restarting, a connection dropped, a timeout, a
    serialization failure or deadlock. ``sqlstate`` is PostgreSQL's error code when the
    server answered with one (``23505`` unique violation, ``57P01`` admin shutdown...)."""

    def __init__(
        self, message: str, *, transient: bool = False, sqlstate: str | None = None
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.sqlstate = sqlstate


class MigrationError(StoreError):
    """A migration cannot be applied (changed after it was applied, or failed)."""


class SessionNotFound(StoreError):
    """No session (or no message of the kind asked for) with that id or key."""


class LeaseLost(StoreError):
    """A claim (a turn's lease, a delivery's send) was taken over by another worker; its
    result must be discarded."""


class RequestError(GatewayError):
    """An operator or agent asked for something that cannot be done as asked: an unknown
    record, a malformed cursor, a closed session. ``status`` is the HTTP status the admin API
    answers with (4xx); MCP tools report the message as a tool error."""

    def __init__(self, message: str, *, status: int = 422, title: str = "Invalid request") -> None:
        super().__init__(message)
        self.status = status
        self.title = title
