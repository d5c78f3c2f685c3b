"""When a schedule fires: one-shot times and cron expressions read in the schedule's time
zone (the cron library is croniter: no parser of ours), and the missed-firing policy.

- A firing less than ``MAX_LATE`` late (a replica was down, or busy) runs once; a later one is
  recorded as skipped.
- A cron schedule's next firing is the first one after *now*, computed after each firing, so a
  replica down for a week fires once (or skips once), not seven times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, croniter

from gateway.core.errors import RequestError

#: a firing later than this is recorded as skipped instead of run
MAX_LATE = timedelta(hours=1)
AT_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")


def zone(name: str | None) -> ZoneInfo:
    """The time zone ``name`` (default UTC); a 400 naming it when unknown."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise RequestError(f"unknown time zone {name!r} (use an IANA name: Europe/Berlin)") from exc


def parse_at(text: str, tz: str | None = None) -> datetime:
    """``2026-12-04 09:00`` in ``tz`` (an ISO time with its own offset keeps it)."""
    text = text.strip()
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        when = None
        for fmt in AT_FORMATS:
            try:
                when = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
    if when is None:
        raise RequestError(f"{text!r} is not a time: write YYYY-MM-DD HH:MM")
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone(tz))
    return when.astimezone(UTC)


def check_cron(expression: str) -> str:
    """A cron expression croniter accepts (5 fields, or 6 with seconds last); else a 400."""
    expression = " ".join(expression.split())
    if not expression or not croniter.is_valid(expression):
        raise RequestError(
            f"{expression!r} is not a cron expression (minute hour day month weekday, "
            'for example "0 9 * * 1-5")'
        )
    return expression


def next_cron(expression: str, tz: str, after: datetime) -> datetime:
    """The first time of ``expression`` strictly after ``after``, read in ``tz``."""
    try:
        it = croniter(expression, after.astimezone(zone(tz)))
        found: datetime = it.get_next(datetime)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise RequestError(f"{expression!r}: {exc}") from exc
    return found.astimezone(UTC)


@dataclass(frozen=True, slots=True)
class Plan:
    action: Literal["fire", "skip"]
    next_fire_at: datetime | None
    reason: str | None = None


def plan(
    *, cron: str | None, tz: str, due: datetime, now: datetime, max_late: timedelta = MAX_LATE
) -> Plan:
    """What to do with a firing due at ``due`` seen at ``now``, and the next one."""
    late = now - due
    action: Literal["fire", "skip"] = "fire" if late < max_late else "skip"
    reason = None
    if action == "skip":
        reason = f"missed by {_duration(late)} (more than {_duration(max_late)} late)"
    following = None if cron is None else next_cron(cron, tz, max(now, due))
    return Plan(action=action, next_fire_at=following, reason=reason)


def first_firing(*, at: datetime | None, cron: str | None, tz: str, now: datetime) -> datetime:
    if at is not None:
        return at
    assert cron is not None
    return next_cron(cron, tz, now)


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400} d {seconds % 86400 // 3600} h"
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min {seconds % 60} s"
