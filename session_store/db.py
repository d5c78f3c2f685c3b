"""The pool, and the one boundary where driver errors become the store's own.

Every repository of the store (``Store``, ``OperatorStore``, ...) runs its SQL through
``Database.connection()`` or ``Database.transaction()``; the leader lock and the migrator, which
hold connections of their own, go through ``translated()``. Whatever the driver, the socket or
a timeout raises there comes out as a ``StoreError`` that says whether it is transient and
keeps PostgreSQL's sqlstate, so nothing above the store ever catches asyncpg.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any

import asyncpg
import structlog

from session_store.errors import StoreError
from session_store.values import EncodedJson

log = structlog.get_logger(__name__)

#: seconds to open one connection; a server that does not answer (a blackholed host) must not
#: hold a worker for asyncpg's default minute
CONNECT_TIMEOUT = 5.0
#: seconds to wait for a free pooled connection before reporting the pool as exhausted
ACQUIRE_TIMEOUT = 30.0

#: sqlstate classes and codes after which the same call may succeed later: connection
#: exceptions, serialization failures and deadlocks, insufficient resources, operator
#: intervention (shutdown, "the database system is starting up"), system errors
_TRANSIENT_CLASSES = ("08", "53", "57", "58")
_TRANSIENT_CODES = ("40001", "40P01")


def is_transient_sqlstate(sqlstate: str | None) -> bool:
    if not sqlstate:
        return False
    return sqlstate.startswith(_TRANSIENT_CLASSES) or sqlstate in _TRANSIENT_CODES


def translate(exc: BaseException) -> StoreError | None:
    """The ``StoreError`` for a driver, socket or timeout error; ``None`` for anything else
    (our own errors, cancellation, bugs), which the caller re-raises unchanged."""
    if isinstance(exc, StoreError):
        return None
    if isinstance(exc, asyncpg.PostgresError):
        sqlstate = getattr(exc, "sqlstate", None)
        return StoreError(
            str(exc) or type(exc).__name__,
            transient=is_transient_sqlstate(sqlstate),
            sqlstate=sqlstate,
        )
    if isinstance(exc, asyncpg.InternalClientError):
        # "cannot switch to state N; another operation is in progress": a connection left
        # half-way through a protocol exchange when the server went away (seen in the fault
        # campaign after a fast shutdown). The pool replaces it; the call may be retried.
        return StoreError(f"database connection: {exc}", transient=True)
    if isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError):
        # asyncpg's client-side DataError: an argument it cannot encode (an integer out of
        # range, text with lone surrogates). The same value fails every time
        return StoreError(f"invalid value: {exc}", transient=False, sqlstate="22000")
    if isinstance(exc, UnicodeError):
        return StoreError(f"invalid text: {exc}", transient=False, sqlstate="22021")
    if isinstance(exc, asyncpg.InterfaceError):
        # "connection is closed", "another operation is in progress" after a dropped socket...
        # the pool replaces the connection; only a closed pool stays broken
        closing = "pool is closed" in str(exc) or "pool is closing" in str(exc)
        return StoreError(f"database connection: {exc}", transient=not closing)
    if isinstance(exc, TimeoutError):
        return StoreError("database timeout", transient=True)
    if isinstance(exc, OSError):
        return StoreError(f"database unreachable: {exc}", transient=True)
    return None


@contextmanager
def translated() -> Iterator[None]:
    """Run a block whose driver errors must come out as ``StoreError``."""
    try:
        yield
    except Exception as exc:
        error = translate(exc)
        if error is None:
            raise
        raise error from exc


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=_dumps, decoder=json.loads, schema="pg_catalog")


async def _no_reset(conn: asyncpg.Connection) -> None:
    return None


def _dumps(value: Any) -> str:
    if type(value) is EncodedJson:
        return value.text  # encoded once, where its size was measured
    # default=str: a payload with a stray non-JSON value (bytes, datetime) is stored as text
    # rather than failing the ingest
    return json.dumps(value, default=str, separators=(",", ":"))


class Database:
    """An asyncpg pool behind the error boundary. Connections carry no session state."""

    def __init__(self, pool: asyncpg.Pool, dsn: str) -> None:
        self._pool = pool
        #: for the few uses that need a dedicated connection (leader election, LISTEN)
        self.dsn = dsn
        #: connections taken through ``connection()`` (every use of the pool goes through it)
        #: in use or on their way back to the pool: with none parked, below the pool's size
        #: one is free in the pool, so the acquire cannot wait
        self._busy = 0
        self._size = pool.get_max_size()
        #: connections between two uses, kept out of asyncpg's pool (its release and acquire
        #: cost a fifth of the hot path's client CPU), with the generation they belong to: a
        #: transient error (a restart of the server) starts a new one, and older ones go back
        #: to the pool, which reopens them. Taken oldest first, so every connection opened
        #: keeps serving: PostgreSQL prepares and plans each statement again per connection
        #: (the first run of the claim about 5 ms, the next four 1.5-2 ms each, then 0.6), and
        #: newest first left all but the top one or two cold until a burst reached them and
        #: paid for all of it at once (the first burst at 200 msgs/s had a p99 of 100-180 ms)
        self._parked: deque[tuple[Any, int]] = deque()
        self._generation = 0
        self._closing = False
        #: uses waiting in the pool's acquire: a connection coming back goes to them, not to
        #: the parked list (they wait on the pool's queue)
        self._waiting = 0

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 2, max_size: int = 10) -> Database:
        with translated():
            pool = await asyncpg.create_pool(
                dsn,
                min_size=min_size,
                max_size=max_size,
                init=_init_connection,
                timeout=CONNECT_TIMEOUT,
                # connections carry no session state (no SET, no LISTEN, no prepared names of
                # our own), so the per-release RESET round trip is pure cost. ``reset=None``
                # would mean asyncpg's default (that round trip); a no-op keeps only its local
                # part (an open transaction is still rolled back)
                reset=_no_reset,
            )
        assert pool is not None
        return cls(pool, dsn)

    async def close(self) -> None:
        self._closing = True
        await self._give_back_parked()
        await self._pool.close()

    async def _give_back(self, conn: Any) -> None:
        await self._pool.release(conn)

    async def _unpark(self, conn: Any) -> None:
        """A parked connection back to the pool (counted as busy until it is there)."""
        self._busy += 1
        try:
            with suppress(Exception):  # its socket failed: the pool replaces it either way
                await self._give_back(conn)
        finally:
            self._busy -= 1

    async def _give_back_parked(self) -> None:
        while self._parked:
            await self._unpark(self._parked.pop()[0])

    def connection(self) -> _Pooled:
        """``async with db.connection() as conn``: a pooled connection; every driver error
        inside becomes a ``StoreError``."""
        return _Pooled(self)

    async def _failed(self, exc: BaseException) -> BaseException:
        """What to raise for ``exc`` out of a pooled block: its ``StoreError``, or itself."""
        error = translate(exc)
        if error is None:
            return exc
        if error.transient:
            # after a restart of the server every idle connection is dead: have the pool
            # reopen them all instead of failing once per stale connection
            self._generation += 1
            await self._pool.expire_connections()
            await self._give_back_parked()
        return error

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection inside a transaction (committed when the block ends)."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def custom_plans(self) -> AsyncIterator[asyncpg.Connection]:
        """``transaction()`` whose statements PostgreSQL plans for their parameters on every
        run (``plan_cache_mode = force_custom_plan``), never with a generic plan of the
        prepared statement: for statements whose best plan depends on the values (how
        common a searched word is) more than planning costs."""
        async with self.transaction() as conn:
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            yield conn

    async def ping(self) -> None:
        async with self.connection() as conn:
            await conn.fetchval("SELECT 1")


class _Pooled:
    """``Database.connection()``, written out rather than a generator-based context manager:
    the hot path takes a connection twice per message."""

    __slots__ = ("_conn", "_db", "_generation")

    def __init__(self, db: Database) -> None:
        self._db = db
        self._conn: Any = None
        #: the database's generation when the connection was taken: it is parked under it
        self._generation = 0

    async def __aenter__(self) -> asyncpg.Connection:
        db = self._db
        parked = db._parked
        while parked:
            conn, generation = parked.popleft()
            if generation == db._generation and _reusable(conn):
                db._busy += 1
                self._conn = conn
                self._generation = generation
                return conn
            await db._unpark(conn)
        # with a connection free the acquire does not wait (a reconnect, rare, is bounded by
        # CONNECT_TIMEOUT): no timer armed and cancelled per statement, in the acquire and
        # again in the release (a twentieth of the gateway's CPU per message). The
        # count is ours, O(1); the pool's ``get_idle_size`` walks every connection
        timeout = None if db._busy < db._size else ACQUIRE_TIMEOUT
        db._busy += 1
        self._generation = db._generation
        db._waiting += 1
        try:
            conn = await db._pool.acquire(timeout=timeout)
        except Exception as exc:
            db._busy -= 1
            failure = await db._failed(exc)
            if failure is exc:
                raise
            raise failure from exc
        except BaseException:
            db._busy -= 1
            raise
        finally:
            db._waiting -= 1
        self._conn = conn
        return conn

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        db = self._db
        conn, self._conn = self._conn, None
        if exc is None and not db._waiting and not db._closing and _reusable(conn):
            # a clean use, nobody waiting for a connection: keep it for the next use instead
            # of asyncpg's release (a shielded task, a reset, a timeout scope) and acquire
            #
            db._busy -= 1
            db._parked.append((conn, self._generation))
            return
        try:
            await db._give_back(conn)
        except Exception as release_exc:
            failure = await db._failed(release_exc)
            if failure is release_exc:
                raise
            raise failure from release_exc
        finally:
            db._busy -= 1
        if isinstance(exc, Exception):
            failure = await db._failed(exc)
            if failure is not exc:
                raise failure from exc


def _reusable(conn: Any) -> bool:
    """A pooled connection that may serve the next use as it is: still attached to its pool
    slot (asyncpg detaches it when the socket closes), open, outside any transaction, no
    cancellation under way. These are asyncpg internals (the pool proxy's connection, the
    protocol's cancelling flag): should a release of asyncpg not have them, nothing is kept
    and every use goes back through the pool as before."""
    try:
        raw = conn._con
        return (
            raw is not None
            and not raw.is_closed()
            and not raw.is_in_transaction()
            and not raw._protocol._is_cancelling()
        )
    except AttributeError:
        return False
