"""``Database.connection()`` keeps a connection between clean uses: what it must
never hand to the next use, against a real PostgreSQL. One connection per pool, so the next
use would get the same one."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from session_store.db import Database
from session_store.errors import StoreError


async def _pid(db: Database) -> int:
    async with db.connection() as conn:
        return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def test_a_connection_left_in_a_transaction_is_rolled_back_before_its_next_use(
    database_url: str,
) -> None:
    db = await Database.connect(database_url, min_size=1, max_size=1)
    try:
        async with db.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TABLE left_open (x int)")
        async with db.connection() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT to_regclass('left_open')") is None
    finally:
        await db.close()


async def test_a_use_that_failed_does_not_leave_its_connection_for_the_next(
    database_url: str,
) -> None:
    db = await Database.connect(database_url, min_size=1, max_size=1)
    try:
        with pytest.raises(StoreError):
            async with db.connection() as conn:
                await conn.execute("BEGIN")
                await conn.execute("SELECT 1/0")
        # the aborted transaction was rolled back: the next use runs statements
        async with db.connection() as conn:
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await db.close()


async def test_a_connection_killed_between_uses_is_replaced(database_url: str) -> None:
    db = await Database.connect(database_url, min_size=1, max_size=1)
    admin = await asyncpg.connect(database_url)
    try:
        first = await _pid(db)
        await admin.execute("SELECT pg_terminate_backend($1)", first)
        # at most one use may fail (transient) before the dead connection is replaced
        second = None
        for _ in range(2):
            try:
                second = await _pid(db)
                break
            except StoreError as exc:
                assert exc.transient
        assert second is not None and second != first
    finally:
        await admin.close()
        await db.close()


async def test_uses_beyond_the_pool_size_wait_for_a_connection(database_url: str) -> None:
    db = await Database.connect(database_url, min_size=1, max_size=2)
    try:

        async def use(i: int) -> int:
            async with db.connection() as conn:
                await asyncio.sleep(0.01)
                return int(await conn.fetchval("SELECT $1::int", i))

        assert await asyncio.gather(*(use(i) for i in range(20))) == list(range(20))
        assert await _pid(db) > 0
    finally:
        await db.close()


async def test_kept_connections_take_turns_so_each_one_opened_stays_warm(
    database_url: str,
) -> None:
    """PostgreSQL prepares and plans each statement per connection; a connection that only a
    burst reaches pays for all of it then. Every connection a burst opened keeps serving."""
    db = await Database.connect(database_url, min_size=1, max_size=3)
    try:
        both = asyncio.Event()
        opened: list[int] = []

        async def hold() -> None:
            async with db.connection() as conn:
                opened.append(int(await conn.fetchval("SELECT pg_backend_pid()")))
                if len(opened) == 3:
                    both.set()
                await both.wait()

        await asyncio.gather(hold(), hold(), hold())
        # one use at a time afterwards: each opened connection serves in its turn
        served = [await _pid(db) for _ in range(6)]
        assert sorted(set(served)) == sorted(opened)
        assert served[:3] == served[3:]
    finally:
        await db.close()
