"""The database a command uses: ``DATABASE_URL``, or the embedded server under
GATEWAY_DATA_DIR (stopped when this process is its last user)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from gateway.core.settings import Settings


@contextlib.asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[str]:
    """The DSN to use: ``DATABASE_URL``, or the embedded server under GATEWAY_DATA_DIR."""
    if settings.database_url:
        yield settings.database_url
        return
    from session_store.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.gateway_data_dir)
    dsn = await embedded.start()
    try:
        yield dsn
    finally:
        # after the pool is closed; the server stops only when this process is its last user
        # (a second gateway sharing the data dir keeps it)
        await embedded.stop()
