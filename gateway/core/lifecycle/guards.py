"""Guards of one piece of work: coroutines that watch it while it runs (a lease renewal, a
turn's watch for a stop) and do nothing before a first wait is over.

Most work is over before any guard would act: an echo answers, a send returns, in a few
milliseconds, while the first renewal is due after a third of the lease and the first look
for a stop after half a second. So the guards are started only once that first wait has
passed (``race``), instead of as tasks beside the work that sleep first: a turn or a send
that ends sooner costs one timer, not two tasks, their sleeps, their cancellation and the
gathering of them (a measurable share of the CPU per message)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Guard:
    """``start(first)`` is the guard's coroutine; ``first`` is how long it waits before it
    first acts, counted from the start of the work (``race`` passes what is left of it)."""

    first: float
    start: Callable[[float], Coroutine[Any, Any, Any]]
    name: str


def renewal_interval(lease_seconds: float) -> float:
    """How often a held lease is renewed: three times a term, so a renewal or two the
    database cannot answer still leaves the lease held."""
    return lease_seconds / 3


async def race(
    work: asyncio.Future[Any], guards: Sequence[Guard]
) -> tuple[set[asyncio.Future[Any]], list[asyncio.Task[Any]]]:
    """Wait until ``work`` or one of the guards is done (``asyncio.wait``'s
    ``FIRST_COMPLETED``); a guard is started only when the earliest first wait is over and
    the work is not. Returns what is done and the guards started: the caller cancels those
    (``stop_guards``) once it is over, as it would tasks it had started itself. ``work`` is
    never cancelled here."""
    if not guards:
        done, _ = await asyncio.wait({work})
        return done, []
    earliest = min(g.first for g in guards)
    done, _ = await asyncio.wait({work}, timeout=earliest)
    if done:
        return done, []
    started = [
        asyncio.create_task(g.start(max(0.0, g.first - earliest)), name=g.name) for g in guards
    ]
    try:
        done, _ = await asyncio.wait({work, *started}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        for task in started:  # cancelled: no guard outlives the wait for its work
            task.cancel()
        raise
    return done, started


async def stop_guards(started: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel the guards ``race`` started and wait for them to end."""
    if not started:
        return
    for task in started:
        task.cancel()
    await asyncio.gather(*started, return_exceptions=True)


class Deferred:
    """A task started after ``delay`` unless stopped sooner: until then a timer only (the
    typing indicator, the provider's status line: shown only when an answer takes a
    while, so most turns never start them). The task runs in the context of the code that
    deferred it (the timer's callback does)."""

    __slots__ = ("_factory", "_handle", "_name", "_task")

    def __init__(
        self, delay: float, factory: Callable[[], Coroutine[Any, Any, Any]], name: str
    ) -> None:
        self._factory = factory
        self._name = name
        self._task: asyncio.Task[Any] | None = None
        self._handle = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._task = asyncio.create_task(self._factory(), name=self._name)

    @property
    def started(self) -> bool:
        return self._task is not None

    async def stop(self) -> None:
        """Cancel the timer, or the task it started, and wait for the task to end."""
        self._handle.cancel()
        if self._task is not None:
            await stop_guards([self._task])
