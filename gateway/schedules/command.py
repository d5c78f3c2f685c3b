"""``/schedule`` in a chat: ``at 2026-12-04 09:00 TEXT``, ``cron "0 9 * * 1-5" TEXT``,
``list``, ``cancel ID``. The place is the thread the command was sent in (exact); the
schedule belongs to whoever sent it (``platform:scope:user_id``), who alone may cancel it
there (operators cancel any through the CLI, the admin API or MCP)."""

from __future__ import annotations

import re
from datetime import UTC

from gateway.core.commands import parse_command
from gateway.core.domain import Reply
from gateway.core.errors import RequestError
from gateway.schedules.service import ScheduleService
from gateway.turns.stage import COMMAND_MODEL, TurnRun
from session_store.records import MessageRecord
from session_store.repos.schedules import ScheduleRecord

USAGE = (
    'Usage: /schedule at 2026-12-04 09:00 TEXT | /schedule cron "0 9 * * 1-5" TEXT | '
    "/schedule list | /schedule cancel ID (times in UTC)"
)
# a quoted expression: straight or typographic quotes (Slack and phones curl them)
_QUOTES = "\"'\u2018\u2019\u201c\u201d"
_CRON = re.compile(rf"^cron\s+[{_QUOTES}](?P<expr>[^{_QUOTES}]+)[{_QUOTES}]\s+(?P<text>.+)$", re.S)
_AT = re.compile(
    r"^at\s+(?P<when>\d{4}-\d{2}-\d{2}(?:[ T]\d{1,2}:\d{2}(?::\d{2})?))\s+(?P<text>.+)$", re.S
)


def account_of(turn: TurnRun, ask: MessageRecord) -> str:
    key = turn.claim.key
    return f"{key.platform}:{key.scope}:{ask.sender_id or 'unknown'}"


def argument_of(text: str) -> str:
    """What follows ``/schedule`` (after a mention the adapter left in the text, too)."""
    at = text.find("/schedule")
    parsed = parse_command(text[at:] if at >= 0 else text)
    return parsed.argument if parsed is not None else ""


def describe(s: ScheduleRecord) -> str:
    when = f'cron "{s.cron}" ({s.time_zone})' if s.cron else f"at {s.fire_at:%Y-%m-%d %H:%M} UTC"
    nxt = f"{s.next_fire_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if s.next_fire_at else "-"
    last = f", last {s.last_outcome}" if s.last_outcome else ""
    state = "" if s.status == "active" else f" [{s.status}]"
    return f"#{s.id} {when}, next {nxt}{last}{state}: {s.prompt[:80]}"


class ScheduleCommand:
    name = "schedule"

    def __init__(self, service: ScheduleService) -> None:
        self._service = service

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        try:
            text = await self._answer(turn, ask, argument_of(ask.content))
        except RequestError as exc:
            text = f"{exc} — {USAGE}" if exc.status == 422 else str(exc)
        return Reply(text=text, model=COMMAND_MODEL)

    async def _answer(self, turn: TurnRun, ask: MessageRecord, arg: str) -> str:
        key = turn.claim.key
        words = arg.split()
        verb = words[0].lower() if words else ""
        if verb == "list":
            found = await self._service.listing(place=key)
            if not found:
                return "No schedules here."
            return "\n".join(["Schedules here:", *(describe(s) for s in found)])
        if verb == "cancel":
            if len(words) != 2 or not words[1].lstrip("#").isdigit():
                return USAGE
            removed = await self._service.cancel(
                int(words[1].lstrip("#")), by=account_of(turn, ask)
            )
            return f"Cancelled schedule #{removed.id}."
        owner = account_of(turn, ask)
        cron = _CRON.match(arg)
        at = _AT.match(arg)
        if cron is not None:
            made = await self._service.create(
                key, prompt=cron["text"], owner=owner, cron=cron["expr"]
            )
        elif at is not None:
            made = await self._service.create(key, prompt=at["text"], owner=owner, at=at["when"])
        else:
            return USAGE
        return f"Scheduled {describe(made)}"
