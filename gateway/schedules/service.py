"""What every way of making a schedule shares (chat, ``gateway schedule``, the admin API, the
MCP tools): checking it, storing it, listing, cancelling under the ownership rule, and firing
one now. A person cancels their own schedules; an operator (the CLI, the admin API, MCP)
cancels any."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from gateway import audit
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import RequestError
from gateway.core.places import KnownPlaces
from gateway.schedules.places import parse_place
from gateway.schedules.timing import check_cron, first_firing, parse_at, plan, zone
from session_store.repos.schedules import Decision, Fired, ScheduleRecord, Schedules

#: the longest prompt a schedule asks
MAX_PROMPT = 20_000
#: the owner of a schedule made by an operator without naming one
OPERATOR = "operator"

Clock = Callable[[], datetime]
Targets = Callable[[SessionKey], ReplyTarget]


def utc_now() -> datetime:
    return datetime.now(UTC)


class ScheduleService:
    def __init__(
        self,
        repo: Schedules,
        *,
        targets: Targets,
        clock: Clock = utc_now,
        known: KnownPlaces | None = None,
    ) -> None:
        self.repo = repo
        self._targets = targets
        self.clock = clock
        #: checks an operator's place (None: taken as given)
        self.known = known

    async def create_checked(
        self,
        place: str,
        *,
        prompt: str,
        owner: str = OPERATOR,
        at: str | None = None,
        cron: str | None = None,
        tz: str | None = None,
        name: str | None = None,
        strict: bool = False,
    ) -> tuple[ScheduleRecord, list[str]]:
        """A schedule an operator typed the place of (``gateway schedule add``, the admin API,
        MCP): a platform no surface serves is refused (``UnknownPlatform``, 422); a place the
        gateway has never seen is made with a warning, or refused when ``strict``. The
        schedule and the warnings."""
        if "\x00" in place:
            raise RequestError("a schedule's text cannot contain NUL characters")
        key = parse_place(place)
        warnings: list[str] = []
        if self.known is not None:
            warnings = await self.known.check_place(key, place, strict=strict)
        made = await self.create(
            key, prompt=prompt, owner=owner, at=at, cron=cron, tz=tz, name=name
        )
        return made, warnings

    async def create(
        self,
        place: str | SessionKey,
        *,
        prompt: str,
        owner: str = OPERATOR,
        at: str | datetime | None = None,
        cron: str | None = None,
        tz: str | None = None,
        name: str | None = None,
    ) -> ScheduleRecord:
        texts = (place if isinstance(place, str) else "", prompt, owner, at, cron, tz, name)
        if any(isinstance(t, str) and "\x00" in t for t in texts):
            raise RequestError("a schedule's text cannot contain NUL characters")
        key = parse_place(place) if isinstance(place, str) else place
        prompt = prompt.strip()
        if not prompt:
            raise RequestError("a schedule needs a prompt: what to ask at each firing")
        if len(prompt) > MAX_PROMPT:
            raise RequestError(f"the prompt is longer than {MAX_PROMPT} characters")
        if (at is None) == (cron is None):
            raise RequestError("give a schedule either a time (at) or a cron expression")
        time_zone = zone(tz).key
        now = self.clock()
        fire_at = None
        if at is not None:
            fire_at = parse_at(at, time_zone) if isinstance(at, str) else at.astimezone(UTC)
            if fire_at <= now:
                raise RequestError(f"{fire_at:%Y-%m-%d %H:%M} UTC is in the past")
        expression = None if cron is None else check_cron(cron)
        made = await self.repo.add(
            key=key,
            prompt=prompt,
            owner=owner,
            time_zone=time_zone,
            fire_at=fire_at,
            cron=expression,
            next_fire_at=first_firing(at=fire_at, cron=expression, tz=time_zone, now=now),
            name=name,
        )
        await audit.record(
            self.repo,
            "schedule.create",
            ("schedule", made.id),
            details={"place": str(key), "owner": owner, "at": str(fire_at), "cron": expression},
            actor=None if owner == OPERATOR else owner,
        )
        return made

    async def listing(
        self, *, place: SessionKey | None = None, owner: str | None = None
    ) -> list[ScheduleRecord]:
        return await self.repo.listing(place=place, owner=owner)

    async def get(self, schedule_id: int) -> ScheduleRecord:
        found = await self.repo.get(schedule_id)
        if found is None:
            raise RequestError(f"no schedule {schedule_id}", status=404, title="Not found")
        return found

    async def cancel(self, schedule_id: int, *, by: str | None = None) -> ScheduleRecord:
        """Remove a schedule: ``by`` a person (only their own), or ``None``: an operator."""
        found = await self.get(schedule_id)
        if by is not None and found.owner != by:
            raise RequestError(
                f"schedule {schedule_id} is not yours: only its owner or an operator can cancel it",
                status=403,
                title="Forbidden",
            )
        removed = await self.repo.delete(schedule_id)
        if removed is None:
            raise RequestError(f"no schedule {schedule_id}", status=404, title="Not found")
        await audit.record(
            self.repo,
            "schedule.delete",
            ("schedule", schedule_id),
            details={"owner": found.owner},
            actor=by,
        )
        return removed

    async def run(self, schedule_id: int) -> Fired:
        """Fire one now (its regular firings stay as they are)."""
        fired = await self.repo.fire_now(schedule_id, self._fire_now, now=self.clock())
        if fired is None:
            raise RequestError(f"no schedule {schedule_id}", status=404, title="Not found")
        await audit.record(self.repo, "schedule.run", ("schedule", schedule_id))
        return fired

    def decide(self, schedule: ScheduleRecord, due: datetime) -> Decision:
        """The missed-firing policy and the next firing (``gateway.schedules.timing``). A
        schedule whose expression, time zone or place no longer reads (a library or zone
        database changed under it) is recorded as skipped and ends, instead of failing the
        batch it was locked in on every pass."""
        try:
            p = plan(cron=schedule.cron, tz=schedule.time_zone, due=due, now=self.clock())
            target = self._targets(schedule.key)
        except (RequestError, ValueError, KeyError) as exc:
            return Decision(action="skip", next_fire_at=None, reason=f"cannot fire: {exc}")
        return Decision(
            action=p.action, next_fire_at=p.next_fire_at, target=target, reason=p.reason
        )

    def _fire_now(self, schedule: ScheduleRecord, due: datetime) -> Decision:
        return Decision(
            action="fire", next_fire_at=schedule.next_fire_at, target=self._targets(schedule.key)
        )
