"""This process's liveness, visible in PostgreSQL: a session-level advisory lock
``(PROCESS_LOCK_CLASS, process id)`` held on a dedicated connection.

PostgreSQL drops the lock with the connection, so when a process dies (SIGKILL, OOM, a lost
host) its lock is gone within moments, and claims recorded with its id (``sessions.
turn_process``, ``deliveries.claim_process``) are taken over at once instead of after their
lease (``queries.LIVE_PROCESSES``). A live but slow process keeps its lock: it is never robbed,
and its late writes are fenced anyway."""

from __future__ import annotations

import contextlib

import asyncpg
import structlog

from session_store import queries as q
from session_store.db import CONNECT_TIMEOUT, translated
from session_store.errors import StoreError

log = structlog.get_logger(__name__)


class ProcessLiveness:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        #: this process's id, taken once and kept across reconnects
        self.process_id: int | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def ensure(self) -> int:
        """Hold the liveness lock: check the connection, reconnect and lock again if it
        died (the database restarted). Returns the process id; ``StoreError`` while the
        database cannot be reached."""
        if self._conn is not None:
            try:
                with translated():
                    await self._conn.fetchval("SELECT 1")
                assert self.process_id is not None
                return self.process_id
            except StoreError as exc:
                log.warning("process_liveness_lost", process_id=self.process_id, error=str(exc))
                self._drop()
        with translated():
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
        try:
            with translated():
                if self.process_id is None:
                    self.process_id = int(await conn.fetchval(q.NEXT_PROCESS_ID))
                if not await conn.fetchval(q.LOCK_PROCESS, self.process_id):
                    # the id is held by another process (the sequence wrapped): take another
                    self.process_id = int(await conn.fetchval(q.NEXT_PROCESS_ID))
                    if not await conn.fetchval(q.LOCK_PROCESS, self.process_id):
                        raise StoreError("cannot take a process liveness lock", transient=True)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        log.info("process_liveness_held", process_id=self.process_id)
        return self.process_id

    def _drop(self) -> None:
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
