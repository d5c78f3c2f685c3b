"""One pacing budget per bot and chat for everything a gateway does in a chat:
final sends (the outbox), preview edits, drafts and deletes, typing renewals.

Two implementations of ``Budget``, chosen at run time by ``Pacing``:

* ``LocalBudget``: in this process's memory, no database call. Exact while this is the only
  live gateway process (every send and edit of every chat passes through it).
* ``SharedBudget``: PostgreSQL's ``pace_reserve`` (migrations 0008, 0015), one statement per
  reservation, shared by every replica.

Both are the same cell, GCRA's: per key, the time its calls so far have paced it up to (the
theoretical arrival time, TAT). A call may start once every key's TAT is at most its burst
tolerance, ``(burst - 1) * interval``, ahead; it then moves each TAT one interval on. A quiet
chat takes a short burst at once (a backlog after an outage goes out together), a busy one
averages one call per interval; a burst of 1 is plain spacing.

``Pacing`` uses the local budget while the process registry shows no other live gateway
process, and the shared one while it shows some. The liveness loop already checks this
process's lock every ``liveness.CHECK_SECONDS``; the same statement counts the peers
(``ProcessLiveness.peers``), so choosing costs no query per message.

Switching from solo to shared: the reservations still ahead in the local budget are written
into PostgreSQL before any shared reservation is made, so this process's own recent sends
keep their spacing. What cannot be avoided is one liveness check (half a second) in which a
newly started peer already paces in PostgreSQL while this process, not having seen it yet,
still paces locally: in that window a send of one and an edit of the other to the same chat
may be closer than the interval (at most one such overlap per chat; a 429 that follows is
honoured like any other). Shared reservations are mirrored into the local budget, so
switching back to solo keeps this process's own spacing too.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import structlog

from gateway.core.domain import ReplyTarget
from gateway.core.errors import StoreError
from gateway.core.ports import PaceRule, Transport
from session_store.repos.previews import PreviewStore

log = structlog.get_logger(__name__)

Rules = Sequence[PaceRule]
#: a reservation with no acceptable limit on its wait (a final send always goes)
NO_LIMIT = 3600.0


def pace_rules(transport: Transport, target: ReplyTarget) -> list[PaceRule]:
    """The transport's pacing rules for ``target``, keyed per platform (the same keys in
    every replica and for every kind of call)."""
    prefix = transport.platform
    return [rule._replace(key=f"{prefix}:{rule.key}") for rule in transport.pace(target)]


def cosmetic_rules(rules: Rules) -> list[PaceRule]:
    """The rules a cosmetic call (a preview edit or draft, a typing renewal) reserves under:
    the same keys with one burst slot fewer. Such a call starts only while the key would still
    let one more call start, so once it has gone a final send finds its slot free at once
    instead of queueing behind the previews (in a Telegram group, 20 calls a minute, the
    previews otherwise spend the whole burst). A key with a burst of 1 has no slot to spare:
    there the rules are unchanged."""
    return [r._replace(burst=max(r.burst - 1, 1)) for r in rules]


def held(rule: PaceRule, seconds: float) -> float:
    """How far ahead a hold of ``seconds`` puts the key's TAT: the wait plus the whole burst,
    so the first call after it goes at ``seconds`` and the next an interval later."""
    return seconds + tolerance(rule)


def tolerance(rule: PaceRule) -> float:
    """How far ahead of now a key's TAT may be for a call to start at once."""
    return (max(rule.burst, 1) - 1) * rule.interval


class Budget(Protocol):
    async def reserve(self, rules: Rules, max_wait: float = NO_LIMIT) -> float:
        """Reserve the next slot under ``rules``; seconds to wait first. When the wait would
        be over ``max_wait`` nothing is reserved and the wait is returned."""
        ...

    async def hold(self, rules: Rules, seconds: float) -> None:
        """Close every key of ``rules`` for ``seconds`` from now (a 429's Retry-After) with
        its burst spent: the next call waits that long, the one after it an interval more. A
        key already reserved further ahead keeps its time: a second 429 during a hold is
        measured from now, never added to the first."""
        ...


class LocalBudget:
    """Paces calls sharing a key (a chat) without blocking other keys, in memory (the TAT of
    each key, monotonic). Bounded: entries whose spacing has long passed are dropped once the
    map grows."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self._next: OrderedDict[str, float] = OrderedDict()
        self._max_keys = max_keys

    def reserve_now(self, rules: Rules, max_wait: float = NO_LIMIT) -> float:
        now = time.monotonic()
        start = max([now, *(self._next.get(r.key, now) - tolerance(r) for r in rules)])
        if start - now > max_wait:
            return start - now
        self.note(rules, start)
        return start - now

    async def reserve(self, rules: Rules, max_wait: float = NO_LIMIT) -> float:
        return self.reserve_now(rules, max_wait)

    def hold_now(self, rules: Rules, seconds: float) -> None:
        now = time.monotonic()
        for rule in rules:
            self._next[rule.key] = max(self._next.get(rule.key, 0.0), now + held(rule, seconds))
            self._next.move_to_end(rule.key)

    async def hold(self, rules: Rules, seconds: float) -> None:
        self.hold_now(rules, seconds)

    def note(self, rules: Rules, start: float) -> None:
        """Record a reservation starting at monotonic time ``start`` (made elsewhere)."""
        now = time.monotonic()
        for key, interval, _ in rules:
            self._next[key] = max(self._next.get(key, 0.0), start) + interval
            self._next.move_to_end(key)
        while len(self._next) > self._max_keys:
            key, when = next(iter(self._next.items()))
            if when > now:
                break
            del self._next[key]

    def ahead(self) -> list[tuple[str, float]]:
        """(key, seconds until its next free slot) for every key still reserved ahead."""
        now = time.monotonic()
        return [(key, when - now) for key, when in self._next.items() if when > now]


class SharedBudget:
    """The budget every replica shares: ``pace_reserve`` in PostgreSQL."""

    def __init__(self, store: PreviewStore) -> None:
        self._store = store

    async def reserve(self, rules: Rules, max_wait: float = NO_LIMIT) -> float:
        return await self._store.reserve(rules, max_wait=max_wait)

    async def hold(self, rules: Rules, seconds: float) -> None:
        await self._store.seed([(rule.key, held(rule, seconds)) for rule in rules])

    async def seed(self, ahead: Sequence[tuple[str, float]]) -> None:
        await self._store.seed(ahead)


class Pacing:
    """The budget in use: local while this process is the only live gateway, shared while
    peers live (``set_peers``, from the liveness loop)."""

    def __init__(self, shared: SharedBudget | None = None) -> None:
        self.local = LocalBudget()
        self._shared_budget = shared
        self._shared = False
        self._seeding: asyncio.Task[None] | None = None

    @property
    def shared(self) -> bool:
        return self._shared

    def set_peers(self, peers: int | None) -> None:
        """Other live gateway processes, as the last liveness check counted them (None:
        unknown, the database is unreachable: the mode is kept)."""
        if peers is None or self._shared_budget is None:
            return
        shared = peers > 0
        if shared == self._shared:
            return
        log.info("pacing_mode", shared=shared, peers=peers)
        if shared:
            # the local reservations still ahead go first: a shared reservation waits for them
            ahead = self.local.ahead()
            if ahead:
                self._seeding = asyncio.create_task(self._seed(ahead), name="pacing-seed")
        self._shared = shared

    async def _seed(self, ahead: list[tuple[str, float]]) -> None:
        assert self._shared_budget is not None
        try:
            await self._shared_budget.seed(ahead)
        except StoreError as exc:
            log.warning("pacing_seed_failed", error=str(exc), keys=len(ahead))

    async def reserve(self, rules: Rules, max_wait: float = NO_LIMIT) -> float:
        if not rules:
            return 0.0
        if not self._shared or self._shared_budget is None:
            return self.local.reserve_now(rules, max_wait)
        if self._seeding is not None:
            await asyncio.shield(self._seeding)
            self._seeding = None
        asked = time.monotonic()
        try:
            wait = await self._shared_budget.reserve(rules, max_wait)
        except StoreError as exc:
            # the database is away: keep at least this process's spacing
            log.warning("pacing_shared_unavailable", error=str(exc))
            return self.local.reserve_now(rules, max_wait)
        if wait <= max_wait:
            self.local.note(rules, asked + wait)
        return wait

    async def hold(self, rules: Rules, seconds: float) -> None:
        # mirrored locally in both modes, as reservations are (note): the hold outlives a
        # switch to solo pacing
        self.local.hold_now(rules, seconds)
        if not rules or not self._shared or self._shared_budget is None:
            return
        try:
            await self._shared_budget.hold(rules, seconds)
        except StoreError as exc:
            log.warning("pacing_shared_unavailable", error=str(exc))
