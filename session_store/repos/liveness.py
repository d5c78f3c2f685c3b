"""This process's liveness, visible in PostgreSQL: a session-level advisory lock
``(PROCESS_LOCK_CLASS, process id)`` held on a dedicated connection.

PostgreSQL drops the lock with the connection, so when a process dies (SIGKILL, OOM, a lost
host) its lock is gone within moments, and claims recorded with its id (``sessions.
turn_process``, ``deliveries.claim_process``) are taken over at once instead of after their
lease (``live_processes`` in ``liveness.sql``). A live but slow process keeps its lock: it is
never robbed, and its late writes are fenced anyway.

A database restart drops every lock. Each process records the server lifetime in which it took
its lock (``gateway_processes``), so a process that locked since the restart and lost its lock
is known dead at once, and one that has not re-locked yet is presumed alive for a moment
(``relock_grace``) while it reconnects: ``ensure`` is retried every ``RETRY_SECONDS``
while the lock is not held."""

from __future__ import annotations

import contextlib

import asyncpg
import structlog

from session_store.db import CONNECT_TIMEOUT, translated
from session_store.errors import StoreError
from session_store.sql import load

#: the advisory lock class of the liveness locks (migration 0004)
PROCESS_LOCK_CLASS = 71717171
SQL = load(__package__, "liveness.sql", lock_class=str(PROCESS_LOCK_CLASS))
#: the ids of the gateway processes alive in this database now (a subquery)
LIVE_PROCESSES = SQL.live_processes

log = structlog.get_logger(__name__)


def dead_process(column: str) -> str:
    """A condition: the process recorded in ``column`` is dead. It holds no liveness lock, and
    that is known to be final. A database restart drops every lock until each live process
    has reconnected (within a second), so "no lock" proves death only for a process that took
    its lock in this server lifetime (``gateway_processes``, migration 0012) and has lost it
    since, or once some process re-locked in this lifetime more than ``relock_grace`` ago: a
    live owner never waits longer than that to re-lock, so it is not robbed; a dead one is
    found at once. Pasted into the turns' and the outbox's claims (``{{dead_...}}``)."""
    live = SQL.live_processes.strip()
    grace = SQL.relock_grace.strip()
    return f"""({column} IS NOT NULL AND {column} NOT IN ({live})
        AND EXISTS (SELECT 1 FROM gateway_processes p
                    WHERE p.server_started_at = pg_postmaster_start_time()
                      AND (p.id = {column} OR p.locked_at < now() - {grace})))"""


#: seconds between checks of a held lock, and between attempts to take it again once lost
CHECK_SECONDS = 0.5
RETRY_SECONDS = 0.1


class ProcessLiveness:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        #: this process's id, taken once and kept across reconnects
        self.process_id: int | None = None
        #: other live gateway processes at the last check (None: not known, no lock held)
        self.peers: int | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    @property
    def next_check(self) -> float:
        """Seconds until ``ensure`` should run again: soon while the lock is lost, so a live
        process re-locks well within ``relock_grace`` (``liveness.sql``) of the database's
        return."""
        return CHECK_SECONDS if self.held else RETRY_SECONDS

    async def ensure(self) -> int:
        """Hold the liveness lock: check the connection, reconnect and lock again if it
        died (the database restarted). Returns the process id; ``StoreError`` while the
        database cannot be reached."""
        if self._conn is not None:
            try:
                assert self.process_id is not None
                with translated():
                    # the check itself counts the peers: no other query for it
                    self.peers = int(await self._conn.fetchval(SQL.count_peers, self.process_id))
                return self.process_id
            except StoreError as exc:
                log.warning("process_liveness_lost", process_id=self.process_id, error=str(exc))
                self._drop()
        with translated():
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
        try:
            with translated():
                if self.process_id is None:
                    self.process_id = int(await conn.fetchval(SQL.next_process_id))
                if not await conn.fetchval(SQL.lock_process, self.process_id):
                    # the id is held by another process (the sequence wrapped): take another
                    self.process_id = int(await conn.fetchval(SQL.next_process_id))
                    if not await conn.fetchval(SQL.lock_process, self.process_id):
                        raise StoreError("cannot take a process liveness lock", transient=True)
                # locked in this server lifetime: from now on, losing the lock means death
                await conn.execute(SQL.register_process, self.process_id)
                self.peers = int(await conn.fetchval(SQL.count_peers, self.process_id))
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        log.info("process_liveness_held", process_id=self.process_id)
        try:
            with translated():
                await conn.execute(SQL.prune_processes)
        except StoreError as exc:  # housekeeping only: the next lock prunes again
            log.info("process_registry_prune_failed", error=str(exc))
        return self.process_id

    def _drop(self) -> None:
        self.peers = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.terminate()
        self._conn = None

    async def close(self) -> None:
        """Release the lock (closing the connection drops it)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close(timeout=2.0)
            except Exception:  # noqa: BLE001 - a dead connection has released the lock
                conn.terminate()
