"""Reload requests and each replica's report (``config_reloads``, migration 0033): a request
names the replicas live when it is made (``session_store.repos.liveness``); each of them answers it
once with what it loaded. The policy (when to look, what to load) is the gateway's:
``gateway.runtime.reloads``."""

from __future__ import annotations

from dataclasses import dataclass

from session_store.db import Database
from session_store.repos.liveness import LIVE_PROCESSES
from session_store.sql import load

SQL = load(__package__, "reloads.sql", live_processes=LIVE_PROCESSES)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReloadReport:
    """One replica's answer to a reload request (``outcome`` None: none yet)."""

    process_id: int
    host: str | None
    pid: int | None
    #: 'reloaded', 'failed', or None (no answer yet)
    outcome: str | None
    path: str | None
    sha256: str | None
    error: str | None
    #: the replica still holds its liveness lock
    alive: bool


class Reloads:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def request(self, *, actor: str, path: str | None) -> tuple[int, list[int]]:
        """A new request naming every live replica: its id and the replicas asked."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.request_reload, actor, path)
        assert row is not None
        return int(row["id"]), [int(p) for p in row["replicas"]]

    async def pending(self, process_id: int) -> list[tuple[int, str | None]]:
        """The requests ``process_id`` was asked and has not answered: (id, path meant)."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.pending_reloads, process_id)
        return [(int(r["id"]), r["path"]) for r in rows]

    async def report(
        self,
        reload_id: int,
        *,
        process_id: int,
        host: str,
        pid: int,
        ok: bool,
        path: str | None,
        sha256: str | None,
        error: str | None,
    ) -> None:
        outcome = "reloaded" if ok else "failed"
        async with self.db.connection() as conn:
            await conn.execute(
                SQL.report_reload, reload_id, process_id, host, pid, outcome, path, sha256, error
            )

    async def reports(self, reload_id: int) -> list[ReloadReport]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.reload_reports, reload_id)
        return [
            ReloadReport(
                process_id=int(r["process_id"]),
                host=r["host"],
                pid=r["pid"],
                outcome=r["outcome"],
                path=r["path"],
                sha256=r["sha256"],
                error=r["error"],
                alive=bool(r["alive"]),
            )
            for r in rows
        ]

    async def prune(self) -> None:
        """Requests older than 30 days go, with their reports."""
        async with self.db.connection() as conn:
            await conn.execute(SQL.prune_reloads)
