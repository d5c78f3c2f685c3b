"""Supervised loops: every long-lived loop of the gateway runs under a ``Supervisor``.

A loop body gets a ``beat`` callable and calls it whenever it makes progress (each idle poll,
each item, each lease renewal). The supervisor:

- restarts a body that raised (or returned early) with jittered exponential backoff, and
  counts it: ``gateway_worker_restarts_total{worker}``, ``gateway_worker_up{worker}``;
- tells ``/readyz`` which required loops are down and ``/healthz`` which loops are wedged
  (no beat for ``stall_after`` seconds: several of their intervals, while they are up).

Bodies keep themselves alive through one failed item (``item_backoff`` spaces the retries);
the restart here is the last line, for bugs in the loop itself. ``persist`` retries a store
write whose result is already decided (an answer, a receipt) through a database outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

import structlog

from gateway.core.errors import StoreError
from gateway.core.metrics import Metrics

log = structlog.get_logger(__name__)

T = TypeVar("T")
Beat = Callable[[], None]
Body = Callable[[Beat], Awaitable[None]]

#: a loop is wedged after this many of its intervals without a beat
STALL_INTERVALS = 5


def no_beat() -> None:
    """The ``beat`` of a loop run outside a supervisor."""


#: the beat of the supervised loop this code runs in (tasks it creates inherit it): a write
#: retried through a database outage is a loop waiting on an outage, not a wedged one
CURRENT_BEAT: ContextVar[Beat] = ContextVar("gateway_loop_beat", default=no_beat)


def item_backoff(failures: int, *, initial: float = 0.1, cap: float = 0.5) -> float:
    """Seconds to wait after ``failures`` consecutive failed items: exponential with jitter,
    capped low so a loop resumes within half a second of its cause going away (the database
    back after an outage: every worker's next claim comes at most 0.5 s later, part of the
    5 s recovery bound)."""
    base = min(cap, initial * 2.0 ** max(failures - 1, 0))
    return float(base / 2 + random.random() * base / 2)


async def pause(seconds: float, stopping: asyncio.Event | None = None) -> None:
    """Sleep ``seconds``, or less if ``stopping`` is set meanwhile."""
    if stopping is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)


async def persist(
    op: Callable[[], Awaitable[T]], *, what: str, deadline: float = 120.0, **context: object
) -> T:
    """Run the store write ``op``, retrying while the database is unreachable (transient
    ``StoreError``) for up to ``deadline`` seconds. Anything else, and the last transient
    error after the deadline, is raised."""
    give_up = time.monotonic() + deadline
    failures = 0
    while True:
        try:
            return await op()
        except StoreError as exc:
            if not exc.transient or time.monotonic() >= give_up:
                raise
            failures += 1
            CURRENT_BEAT.get()()
            if failures == 1:
                log.warning("store_write_retrying", write=what, error=str(exc), **context)
            await asyncio.sleep(item_backoff(failures, cap=0.5))


@dataclass(slots=True)
class LoopState:
    name: str
    required: bool
    #: seconds without a beat after which the loop counts as wedged (None: never)
    stall_after: float | None
    up: bool = False
    restarts: int = 0
    last_beat: float = field(default_factory=time.monotonic)


class Supervisor:
    def __init__(
        self,
        metrics: Metrics,
        *,
        restart_initial: float = 0.2,
        restart_max: float = 5.0,
        min_stall: float = 60.0,
    ) -> None:
        self._metrics = metrics
        self._restart_initial = restart_initial
        self._restart_max = restart_max
        #: a floor under every ``stall_after``: a database that does not answer holds a loop
        #: for its connect and acquire timeouts, which is an outage (``/readyz``), not a
        #: wedged process that a restart would cure
        self.min_stall = min_stall
        self.loops: dict[str, LoopState] = {}

    def _set_up(self, state: LoopState, up: bool) -> None:
        state.up = up
        state.last_beat = time.monotonic()
        self._metrics.worker_up.labels(state.name).set(1 if up else 0)

    async def supervise(
        self,
        name: str,
        body: Body,
        *,
        stopping: asyncio.Event | None = None,
        required: bool = True,
        stall_after: float | None = None,
        restart_on_return: bool = True,
    ) -> None:
        """Run ``body`` until ``stopping`` is set (or it returns, when ``restart_on_return``
        is false); restart it with backoff whenever it raises. Cancellation ends it."""
        state = LoopState(name=name, required=required, stall_after=stall_after)
        self.loops[name] = state
        self._metrics.worker_restarts.labels(name).inc(0)

        def beat() -> None:
            state.last_beat = time.monotonic()

        CURRENT_BEAT.set(beat)

        delay = self._restart_initial
        try:
            while stopping is None or not stopping.is_set():
                self._set_up(state, True)
                started = time.monotonic()
                try:
                    await body(beat)
                except Exception:
                    log.exception("worker_crashed", worker=name, restart_in=round(delay, 2))
                else:
                    if not restart_on_return or (stopping is not None and stopping.is_set()):
                        return
                    log.error("worker_exited", worker=name, restart_in=round(delay, 2))
                self._set_up(state, False)
                state.restarts += 1
                self._metrics.worker_restarts.labels(name).inc()
                if time.monotonic() - started > 60.0:
                    delay = self._restart_initial  # it ran fine for a while: start over
                await pause(delay / 2 + random.random() * delay / 2, stopping)
                delay = min(delay * 2, self._restart_max)
        finally:
            self._set_up(state, False)
            # a stopped loop is neither down nor wedged: it is gone
            self.loops.pop(name, None)

    def down(self) -> list[str]:
        """Required loops that are not running now (crashed, waiting to restart)."""
        return sorted(s.name for s in self.loops.values() if s.required and not s.up)

    def wedged(self) -> list[str]:
        """Loops that are up but made no progress for longer than their ``stall_after``."""
        now = time.monotonic()
        return sorted(
            s.name
            for s in self.loops.values()
            if s.up
            and s.stall_after is not None
            and now - s.last_beat > max(s.stall_after, self.min_stall)
        )
