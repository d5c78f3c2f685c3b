"""Leader election with a PostgreSQL advisory lock, for ingress that must run on exactly one
replica (Telegram long polling, the Mattermost websocket, Slack Socket Mode).

The lock lives on a dedicated connection: it is held as long as that connection is, so a dead
leader's lock is released by PostgreSQL itself when its connection drops."""

from __future__ import annotations

import contextlib
import hashlib

import asyncpg
import structlog

from session_store.db import CONNECT_TIMEOUT, translate, translated
from session_store.sql import load

SQL = load(__package__, "leader.sql")

log = structlog.get_logger(__name__)


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory lock key for ``name``."""
    return int.from_bytes(
        hashlib.sha256(f"gateway-leader:{name}".encode()).digest()[:8], "big", signed=True
    )


class LeaderLock:
    def __init__(self, dsn: str, name: str) -> None:
        self._dsn = dsn
        self._key = lock_key(name)
        self._conn: asyncpg.Connection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    async def try_acquire(self) -> bool:
        """Take the lock if nobody holds it. Raises ``StoreError`` when the database cannot
        be reached."""
        if self._conn is not None:
            return True
        with translated():
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT)
        try:
            with translated():
                got = bool(await conn.fetchval(SQL.try_lock, self._key))
        except BaseException:
            conn.terminate()
            raise
        if not got:
            await conn.close()
            return False
        self._conn = conn
        return True

    async def check(self) -> bool:
        """Still the leader? False (and the lock forgotten) if the connection died."""
        if self._conn is None:
            return False
        try:
            await self._conn.fetchval(SQL.ping)
            return True
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            log.warning("leader_connection_lost", error=str(error))
            with contextlib.suppress(Exception):
                self._conn.terminate()
            self._conn = None
            return False

    async def release(self) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        try:
            await conn.execute(SQL.unlock, self._key)
        except Exception as exc:
            if translate(exc) is None:
                raise
            # a dead connection: closing it below releases the lock anyway
        finally:
            await conn.close()
