"""Recording an event: one call, never in the way of the action it records.

``record`` stores the event in its own short transaction right after the action, or on the
caller's connection (``record(conn, ...)`` inside the action's transaction: then the event and
the action commit or roll back together). Who acted and from where come from the context
(``gateway.audit.context``) unless given.

If the event cannot be stored (the database is down, a bug), the action has already happened
and stands: the failure is logged at WARNING as ``audit_record_failed`` with every field of
the event, so the log stream keeps it; ``record`` returns False and never raises. On the
caller's own connection a failed insert fails that transaction, as any statement would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal, Protocol, TypeAlias

import asyncpg
import structlog

from gateway.audit.context import current
from gateway.core.errors import GatewayError
from session_store.db import Database
from session_store.repos.audit import AuditStore, NewEvent, append_on

log = structlog.get_logger(__name__)

Outcome = Literal["ok", "denied", "failed"]
#: (type, id) of what the action was done to: ("kb.document", 42), ("web.account", "ann")
Object = tuple[str, str | int] | None

_MAX_TEXT = 500


class _HasDb(Protocol):
    @property
    def db(self) -> Database: ...


Target: TypeAlias = "_HasDb | Database | asyncpg.Connection"


def event(
    action: str,
    obj: Object = None,
    *,
    outcome: Outcome = "ok",
    reason: str | None = None,
    details: Mapping[str, Any] | None = None,
    actor: str | None = None,
    surface: str | None = None,
    remote_addr: str | None = None,
) -> NewEvent:
    """The event to store: the context's actor and origin unless given."""
    who = current()
    return NewEvent(
        actor=_clip(actor or who.actor),
        action=action,
        object_type=None if obj is None else obj[0],
        object_id=None if obj is None else _clip(str(obj[1])),
        outcome=outcome,
        reason=None if reason is None else _clip(reason),
        remote_addr=remote_addr or who.remote_addr,
        surface=surface or who.surface,
        details=dict(details or {}),
    )


async def record(
    target: Target,
    action: str,
    obj: Object = None,
    *,
    outcome: Outcome = "ok",
    reason: str | None = None,
    details: Mapping[str, Any] | None = None,
    actor: str | None = None,
    surface: str | None = None,
    remote_addr: str | None = None,
) -> bool:
    """Record that ``action`` was done to ``obj``; ``target`` is the ``Store`` (or its
    ``Database``), or a connection inside the action's own transaction. True once stored."""
    new = event(
        action,
        obj,
        outcome=outcome,
        reason=reason,
        details=details,
        actor=actor,
        surface=surface,
        remote_addr=remote_addr,
    )
    if isinstance(target, asyncpg.Connection):
        await append_on(target, new)  # the caller's transaction decides
        return True
    db = target if isinstance(target, Database) else target.db
    try:
        await AuditStore(db).append(new)
    except Exception as exc:  # noqa: BLE001 - never break the action it records
        log.warning(
            "audit_record_failed",
            error=str(exc),
            actor=new.actor,
            action=new.action,
            object_type=new.object_type,
            object_id=new.object_id,
            outcome=new.outcome,
            reason=new.reason,
            remote_addr=new.remote_addr,
            surface=new.surface,
            details=new.details,
        )
        return False
    return True


@asynccontextmanager
async def attempt(
    target: Target,
    action: str,
    obj: Object = None,
    *,
    details: dict[str, Any] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """``async with attempt(store, "delivery.retry", ("delivery", 7)) as details:``: records
    ``ok`` when the block ends, or ``failed`` with the error's words when it raises one of
    the gateway's errors (a 4xx: not found, conflict) and lets it go on. The block may add to
    ``details``."""
    found: dict[str, Any] = dict(details or {})
    try:
        yield found
    except GatewayError as exc:
        await record(target, action, obj, outcome="failed", reason=str(exc), details=found)
        raise
    await record(target, action, obj, details=found)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"
