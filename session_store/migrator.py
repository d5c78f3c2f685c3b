"""Apply the ordered ``.sql`` files shipped in the ``migrations`` package.

Each applied file is recorded with its SHA-256; a file changed after it was applied stops the
run. A session-level advisory lock serializes concurrent runners (replicas starting at once):
the second waits, then finds nothing left to do.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

import asyncpg
import structlog

from session_store.db import CONNECT_TIMEOUT, translated
from session_store.errors import MigrationError
from session_store.sql import load

log = structlog.get_logger(__name__)

# an arbitrary constant shared by every replica of this project
_LOCK_ID = 0x6761_7465_7761_79  # "gateway"

SQL = load(__package__, "migrator.sql")


@dataclass(frozen=True, slots=True)
class Migration:
    filename: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations() -> list[Migration]:
    root = resources.files("migrations")
    files = sorted(
        entry.name for entry in root.iterdir() if entry.name.endswith(".sql") and entry.is_file()
    )
    return [Migration(name, root.joinpath(name).read_text(encoding="utf-8")) for name in files]


async def migrate(dsn: str, migrations: list[Migration] | None = None) -> list[str]:
    """Apply pending migrations; return the filenames applied by this call."""
    migrations = load_migrations() if migrations is None else migrations
    with translated():
        conn = await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT)
    applied_now: list[str] = []
    with translated():
        try:
            await conn.execute(SQL.lock, _LOCK_ID)
            try:
                await conn.execute(SQL.create_table)
                rows = await conn.fetch(SQL.applied)
                applied = {row["filename"]: row["checksum"] for row in rows}
                known = {m.filename for m in migrations}
                for filename in applied:
                    if filename not in known:
                        raise MigrationError(
                            f"migration {filename} is applied in the database but missing from "
                            "this release; refusing to run an older release against a newer "
                            "schema"
                        )
                for migration in migrations:
                    previous = applied.get(migration.filename)
                    if previous is not None:
                        if previous != migration.checksum:
                            raise MigrationError(
                                f"migration {migration.filename} changed after it was applied "
                                f"(recorded {previous[:12]}, file {migration.checksum[:12]}); "
                                "migrations are append-only: add a new file instead"
                            )
                        continue
                    async with conn.transaction():
                        try:
                            await conn.execute(migration.sql)
                        except asyncpg.PostgresError as exc:
                            raise MigrationError(
                                f"migration {migration.filename} failed: {exc}"
                            ) from exc
                        await conn.execute(SQL.record, migration.filename, migration.checksum)
                    applied_now.append(migration.filename)
                    log.info("migration_applied", filename=migration.filename)
            finally:
                await conn.execute(SQL.unlock, _LOCK_ID)
        finally:
            await conn.close()
    return applied_now
