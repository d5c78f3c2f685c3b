"""In-process wake-ups: the turn scheduler and delivery workers sleep on these instead of
polling the database tightly; live web-chat streams subscribe per (chat, thread)."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


class Signal:
    """A level-triggered wake-up shared by a pool of workers."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self, hint: int | None = None) -> None:
        """Wake the workers; ``hint`` (what the work is about) is for ``WorkSignal``."""
        self._event.set()

    def take(self) -> bool:
        """Consume a pending wake-up without waiting; True if there was one."""
        if self._event.is_set():
            self._event.clear()
            return True
        return False

    async def wait(self, timeout: float) -> bool:
        """True when woken, False after ``timeout``."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True

    async def wake(self, timeout: float) -> tuple[bool, int | None]:
        """``wait``, with the hint of the ``set`` that woke the caller (None: no hint)."""
        return await self.wait(timeout), None


class WorkSignal(Signal):
    """A counting wake-up for a pool of workers claiming from PostgreSQL: each
    ``set`` (one unit of work written: a message asking for a turn, a delivery row) lets
    exactly one worker through to claim it, so no sibling is woken for a claim that finds
    nothing. A level-triggered event woke every worker and each one that woke up made an empty
    claim. Tokens are bounded: past ``max_tokens`` pending wake-ups a worker finds the work
    anyway by claiming until nothing is due (``poll`` keeps a worker looking while it finds
    work).

    A ``set`` may name its unit of work (``hint``, a session id): the worker it lets through
    learns it (``wake``) and claims that one first. Without it a wake-up only says "something
    is due", and two woken workers could swap their work in a way that left one unit with no
    claim at all (see ``TurnScheduler.work``)."""

    def __init__(self, max_tokens: int = 10_000) -> None:
        super().__init__()
        #: one hint (or None) per pending wake-up, oldest first
        self._tokens: deque[int | None] = deque()
        self._max_tokens = max_tokens
        self._waiters: deque[asyncio.Future[int | None]] = deque()

    def set(self, hint: int | None = None) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(hint)
                return
        if len(self._tokens) < self._max_tokens:
            self._tokens.append(hint)

    def wake_all(self) -> None:
        """Shutdown: every waiting worker returns at once (and sees its stop flag)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    @property
    def pending(self) -> int:
        return len(self._tokens)

    def take(self) -> bool:
        if self._tokens:
            self._tokens.popleft()
            return True
        return False

    async def wait(self, timeout: float) -> bool:
        return (await self.wake(timeout))[0]

    async def wake(self, timeout: float) -> tuple[bool, int | None]:
        if self._tokens:
            return True, self._tokens.popleft()
        waiter: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=timeout)
        finally:
            if not waiter.done():
                waiter.cancel()
                self._waiters.remove(waiter)  # at most one entry per worker
        if waiter.done() and not waiter.cancelled():
            return True, waiter.result()
        return False, None


class PollGate:
    """One idle poll per interval per process, shared by a pool's workers: a worker that
    timed out waiting for a wake-up polls only when no sibling polled within ``interval``
    (with 3 replicas of 8 workers the idle polls were a third of all claims)."""

    def __init__(self) -> None:
        self._next = 0.0

    def due(self, interval: float) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + interval
        return True


class Broadcast:
    """Fan-out of events to subscribers of a topic. Subscriber queues are bounded and a
    topic's entry is dropped with its last subscriber, so the map never grows unbounded."""

    def __init__(self, queue_size: int = 256) -> None:
        self._subs: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        self._queue_size = queue_size

    def publish(self, topic: str, event: dict[str, Any]) -> None:
        for queue in list(self._subs.get(topic, ())):
            if queue.full():
                # a stalled reader loses live events, not history: it reloads on reconnect
                continue
            queue.put_nowait(event)

    @asynccontextmanager
    async def subscribe(self, topic: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(self._queue_size)
        self._subs[topic].add(queue)
        try:
            yield queue
        finally:
            subs = self._subs.get(topic)
            if subs is not None:
                subs.discard(queue)
                if not subs:
                    del self._subs[topic]

    def topics(self) -> int:
        return len(self._subs)


class KeyedLock:
    """One asyncio lock per key, dropped as soon as nobody holds or awaits it, so the map
    holds only keys in use (never one entry per thread ever seen)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
