"""People and their platform accounts: an account gets its person on first sight; linking
joins two people into one (the smaller id stays), in one transaction that locks both people
in id order, so two merges at once serialize instead of losing an account."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from session_store.db import Database
from session_store.errors import StoreError
from session_store.sql import load

SQL = load(__package__, "people.sql")

#: PostgreSQL's deadlock_detected
DEADLOCK = "40P01"
#: a merge retries when a concurrent merge moved one of its accounts meanwhile
_MERGE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Person:
    id: int
    created_at: datetime
    accounts: tuple[str, ...]


class LinkCodeInvalid(ValueError):
    """A /link code that is unknown, used already, or expired."""


class People:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def person_of(self, account: str) -> int:
        """The person ``account`` belongs to, created on first sight."""
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.person_of, account)
        return int(value)

    async def list_people(self) -> list[Person]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.list_people)
        return [
            Person(id=r["id"], created_at=r["created_at"], accounts=tuple(r["accounts"]))
            for r in rows
        ]

    async def accounts(self, person_id: int) -> tuple[str, ...]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.person_accounts, person_id)
        return tuple(r["account"] for r in rows)

    async def save_code(self, code: str, account: str, *, ttl_seconds: float) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.person_of, account)
            await conn.execute(SQL.save_code, code, account, ttl_seconds)

    async def redeem(self, code: str, account: str) -> int:
        """Join ``account`` with the account that asked for ``code``; the person now."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.take_code, code)
        if row is None or not row["valid"]:
            raise LinkCodeInvalid(code)
        return await self.link(row["account"], account)

    async def link(self, first: str, second: str) -> int:
        """Make ``first`` and ``second`` one person (every account of both); its id."""
        for _ in range(_MERGE_ATTEMPTS):
            try:
                merged = await self._try_link(first, second)
            except StoreError as exc:
                if exc.sqlstate != DEADLOCK:
                    raise
                continue  # PostgreSQL rolled one merge back: it runs again, whole
            if merged is not None:
                return merged
        raise RuntimeError(f"could not link {first} and {second}: concurrent merges kept moving")

    async def _try_link(self, first: str, second: str) -> int | None:
        async with self.db.transaction() as conn:
            a = int(await conn.fetchval(SQL.person_of, first))
            b = int(await conn.fetchval(SQL.person_of, second))
            if a == b:
                return a
            locked = await conn.fetch(SQL.lock_people, [a, b])
            # a merge that committed while this one waited moved an account: start over
            # with the people the accounts belong to now
            again = (
                int(await conn.fetchval(SQL.person_of, first)),
                int(await conn.fetchval(SQL.person_of, second)),
            )
            if again != (a, b) or any(r["merged_into"] is not None for r in locked):
                return None
            keep, gone = min(a, b), max(a, b)
            await conn.execute(SQL.move_accounts, keep, gone)
            await conn.execute(SQL.move_model_choice, keep, gone)
            await conn.execute(SQL.mark_merged, keep, gone)
            return keep

    async def unlink(self, account: str) -> int:
        """``account`` becomes a person of its own (its usage goes with it); its person."""
        async with self.db.transaction() as conn:
            current = int(await conn.fetchval(SQL.person_of, account))
            await conn.fetch(SQL.lock_people, [current])
            if await conn.fetchval(SQL.account_count, current) <= 1:
                return current
            fresh = int(await conn.fetchval(SQL.new_person))
            await conn.execute(SQL.move_account, account, fresh)
            return fresh
