"""A schedule as JSON: the admin API's answers, the MCP tools' and ``gateway schedule list
--json`` (kept apart from the API module, so the command line does not import the web
framework and the MCP server to print a list)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from session_store.repos.schedules import ScheduleRecord

__all__ = ["ScheduleMade", "ScheduleOut"]


class ScheduleOut(BaseModel):
    id: int
    name: str | None
    place: str
    prompt: str
    owner: str
    time_zone: str
    at: datetime | None
    cron: str | None
    status: str
    paused_reason: str | None
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_outcome: str | None
    failures: int

    @classmethod
    def of(cls, s: ScheduleRecord) -> ScheduleOut:
        return cls(
            id=s.id,
            name=s.name,
            place=s.place,
            prompt=s.prompt,
            owner=s.owner,
            time_zone=s.time_zone,
            at=s.fire_at,
            cron=s.cron,
            status=s.status,
            paused_reason=s.paused_reason,
            next_fire_at=s.next_fire_at,
            last_fire_at=s.last_fire_at,
            last_outcome=s.last_outcome,
            failures=s.failures,
        )


class ScheduleMade(ScheduleOut):
    """A schedule just made, with what its maker should check (a place the gateway has
    never seen)."""

    warnings: list[str]

    @classmethod
    def made(cls, s: ScheduleRecord, warnings: list[str]) -> ScheduleMade:
        return cls(**ScheduleOut.of(s).model_dump(), warnings=warnings)
