"""Run a piece of ingress on exactly one replica: the one holding its leader lock.

Single-connection ingress (Telegram long polling, the Mattermost websocket) must not run on
two replicas at once. An adapter runs only that loop through ``Intake.lead(name, body)`` — its
transport keeps sending on every replica. The lock is a PostgreSQL advisory lock on
a dedicated connection (``session_store.repos.leader``): a dead leader's connection drops it, and
another replica's next attempt takes over."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from gateway.core.errors import StoreError
from session_store.repos.leader import LeaderLock

log = structlog.get_logger(__name__)

Body = Callable[[], Coroutine[Any, Any, None]]


#: seconds between attempts while the database cannot be reached: a replica takes
#: the lock within this of the database's return instead of within ``interval`` (5 s by
#: default), so single-connection ingress (Telegram polling, the Mattermost websocket)
#: resumes with the rest. An attempt on a database that is down is a refused connect.
RETRY_AFTER_ERROR = 0.25
#: while the database stays away, one warning per this many failed attempts
LOG_EVERY = 20


class LeaderElection:
    def __init__(self, dsn: str, *, interval: float) -> None:
        self._dsn = dsn
        self._interval = interval

    async def run(self, name: str, body: Body, *, stopping: asyncio.Event | None = None) -> None:
        """Run ``body`` while holding the lock ``name``; if the lock is lost, cancel ``body``
        and compete again. Returns when ``body`` returns, or when ``stopping`` is set while
        not leading. Cancellation cancels ``body`` and releases the lock."""
        stopping = stopping or asyncio.Event()
        lock = LeaderLock(self._dsn, name)
        failures = 0
        try:
            while not stopping.is_set():
                try:
                    acquired = await lock.try_acquire()
                except StoreError as exc:
                    if failures % LOG_EVERY == 0:
                        log.warning(
                            "leader_election_failed",
                            leader=name,
                            error=str(exc),
                            failures=failures + 1,
                        )
                    failures += 1
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            stopping.wait(), min(self._interval, RETRY_AFTER_ERROR)
                        )
                    continue
                failures = 0
                if not acquired:
                    # someone else leads: its death frees the lock, looked at every interval
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stopping.wait(), self._interval)
                    continue
                log.info("leader_acquired", leader=name)
                task = asyncio.create_task(body(), name=f"leader:{name}")
                try:
                    while not task.done():
                        await asyncio.wait({task}, timeout=self._interval)
                        if not task.done() and not await lock.check():
                            log.warning("leader_lost", leader=name)
                            break
                    if task.done():
                        task.result()  # the body's own exception, if any, propagates
                        return
                finally:
                    if not task.done():
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
        finally:
            await lock.release()
