"""The audit log on the HTTP server: ``GET /api/v1/audit`` (behind the admin API's access
policy) and the operator page ``/ops/audit`` that reads it. It lives with the HTTP surfaces,
not in ``gateway.audit``: the HTTP server records audit events, so the audit room stands
below it."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.routing import Route

from gateway.core.errors import RequestError
from gateway.http import params
from gateway.http.operator import MAX_PAGE, Page, micros_of, paginate, time_position
from gateway.http.ui import room_page
from session_store.db import Database
from session_store.repos.audit import AuditEvent, AuditStore


def _aware(value: datetime | None, name: str) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise RequestError(
            f"{name} needs a time zone (2026-01-31T12:00:00Z)", title="Invalid request"
        )
    return value


def add_audit_routes(router: APIRouter, db: Database) -> None:
    """``GET <router prefix>``: the audit events, newest first."""
    audit = AuditStore(db)

    @router.get("", response_model=Page[AuditEvent], summary="The audit log")
    async def audit_events(
        since: Annotated[
            params.Instant | None, Query(description="from this time (inclusive)")
        ] = None,
        until: Annotated[params.Instant | None, Query(description="before this time")] = None,
        actor: Annotated[
            str | None, Query(max_length=200, pattern=params.NAME, description="exactly")
        ] = None,
        action: Annotated[
            str | None,
            Query(
                max_length=200,
                pattern=params.NAME,
                description="an action, or a prefix of dotted parts: kb",
            ),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[
            str | None,
            Query(max_length=40, pattern=params.AUDIT_CURSOR, description="next_cursor"),
        ] = None,
    ) -> Page[AuditEvent]:
        """Who did what to which object, from where, and how it ended; newest first. Pass
        ``next_cursor`` as ``cursor`` (with the same filters) for the next page."""
        since = _aware(since, "since")
        until = _aware(until, "until")

        async def fetch(after: Any, n: int) -> list[AuditEvent]:
            return await audit.page(
                since=since, until=until, actor=actor, action=action, after=after, limit=n
            )

        return await paginate(
            "audit", cursor, limit, fetch, lambda e: [micros_of(e.at), e.id], parse=time_position
        )


def audit_pages() -> list[Route]:
    """``/ops/audit``: the audit log, newest first, with filters."""
    return room_page("gateway.http.ui", "audit")
