"""Claimed outbox parts waiting for something other than a worker's send: a chat's pacing
slot, or a free worker.

Waiting never occupies a delivery worker. A worker that claims a part whose chat is not ready
reserves the chat's next slot, parks the part here and goes on with other chats; when the slot
comes the part joins the ready queue like a part a finished turn handed over, and the next
free worker sends it at once, without reserving again.

A part that waits here is claimed but off the wire. Whenever it cannot go out at once the row
says so (``pacing_until``, migration 0014, written fenced by its claim): a SIGKILL then leaves
a claim that recovery resends on every platform instead of failing it as ambiguous. The mark
is cleared (fenced) right before the request goes out, after its own write has landed, so a
part found marked has never reached the platform. A part taken at once by an idle worker
writes nothing more: the hot path stays one write per part.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from session_store.records import DeliveryRecord

#: parked parts per process; past it a part whose chat is not ready goes back to the table
#: with its due time (``release``) instead of being held here
PARK_LIMIT = 1024

Mark = Callable[[DeliveryRecord, float], Awaitable[None]]


@dataclass(slots=True, eq=False)
class Held:
    """One claimed part this process holds off the wire."""

    delivery: DeliveryRecord
    #: its pacing slot is reserved and has come: it goes out without reserving again
    reserved: bool = False
    #: the write saying "claimed, not on the wire" (None: never marked, nothing to clear)
    mark: asyncio.Task[None] | None = None
    #: the wait its mark's lease covers
    marked_for: float = 0.0
    timer: asyncio.TimerHandle | None = None
    #: loop time its slot comes (parked parts)
    due: float = 0.0


class WaitingRoom:
    """The ready queue (handed over, or whose slot came) and the parked parts of one
    delivery worker pool. ``wake`` is called once per part that becomes ready."""

    def __init__(self, mark: Mark, wake: Callable[[], None]) -> None:
        self._mark = mark
        self._wake = wake
        self.ready: deque[Held] = deque()
        self.parked: dict[int, Held] = {}
        #: workers waiting for work right now: a ready part beyond them waits, so it is marked
        self.idle = 0

    def __len__(self) -> int:
        return len(self.ready)

    def add(self, delivery: DeliveryRecord) -> None:
        """A part claimed elsewhere (the statement that finished its turn) to send next."""
        held = Held(delivery)
        self.ready.append(held)
        if len(self.ready) > self.idle:
            self.mark(held, 0.0)  # no worker free to take it now: say it waits
        self._wake()

    def take(self) -> Held:
        return self.ready.popleft()

    def can_park(self) -> bool:
        return len(self.parked) < PARK_LIMIT

    def park(self, held: Held, wait: float) -> None:
        """Hold ``held`` until its reserved slot, ``wait`` seconds from now."""
        self.mark(held, wait)
        loop = asyncio.get_running_loop()
        held.due = loop.time() + wait
        held.timer = loop.call_at(held.due, self._come, held)
        self.parked[held.delivery.id] = held

    def mark(self, held: Held, wait: float) -> None:
        """Write the off-wire mark (and a lease covering ``wait``), once; again only when a
        marked part now waits much longer than its mark covers."""
        if held.mark is not None and wait <= held.marked_for + 1.0:
            return
        held.marked_for = wait
        held.mark = asyncio.create_task(
            self._remark(held.mark, held.delivery, wait), name=f"delivery-mark-{held.delivery.id}"
        )

    async def _remark(
        self, previous: asyncio.Task[None] | None, delivery: DeliveryRecord, wait: float
    ) -> None:
        if previous is not None:
            await previous  # in order: the later write is the one that stays
        await self._mark(delivery, wait)

    def _come(self, held: Held) -> None:
        self.parked.pop(held.delivery.id, None)
        held.timer = None
        held.reserved = True
        self.ready.append(held)
        self._wake()

    def drain(self) -> list[Held]:
        """Shutdown: every part held, ready or parked, with its timer stopped."""
        held = list(self.ready)
        self.ready.clear()
        for parked in self.parked.values():
            if parked.timer is not None:
                parked.timer.cancel()
            held.append(parked)
        self.parked.clear()
        return held

    def remaining(self, held: Held) -> float:
        return max(0.0, held.due - asyncio.get_running_loop().time()) if held.due else 0.0
