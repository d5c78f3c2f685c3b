"""Web chat accounts (``GATEWAY_WEB_AUTH=accounts``) and the key that signs their cookies.

The store keeps names, password hashes (made and checked by the core; never plain text) and
the time before which a person's session cookies no longer count."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from session_store.db import Database
from session_store.rows import reader
from session_store.sql import load

SQL = load(__package__, "accounts.sql")


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    id: int
    name: str
    password_hash: str
    created_at: datetime
    #: cookies issued before this are no longer valid
    sessions_valid_after: datetime


_account = reader(Account)

#: the password hash of an account made for an OpenID Connect subject: not a PHC string, so
#: no password ever matches it (``gateway users add NAME`` can still give it one)
NO_PASSWORD = "!oidc"
#: names tried for a new subject before giving up: NAME, NAME-2, ... NAME-<this>
MAX_NAME_TRIES = 1000


class AccountStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, name: str, password_hash: str) -> Account:
        """Create the account, or give an existing one a new password (which signs it out
        everywhere)."""
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.add, name, password_hash)
        assert row is not None
        return _account(row)

    async def get(self, name: str) -> Account | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.get, name)
        return None if row is None else _account(row)

    async def list(self) -> list[Account]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.list)
        return [_account(r) for r in rows]

    async def remove(self, name: str) -> bool:
        async with self._db.connection() as conn:
            status = await conn.execute(SQL.remove, name)
        return str(status).endswith(" 1")

    async def revoke_sessions(self, name: str) -> None:
        """Every cookie issued to ``name`` until now stops counting (sign-out)."""
        async with self._db.connection() as conn:
            await conn.execute(SQL.revoke, name)

    async def for_subject(self, issuer: str, subject: str, name: str) -> Account:
        """The account of an OpenID Connect subject, made on its first sign-in: called
        ``name``, or ``name-2``, ``name-3``, ... when that is taken by anyone else (another
        subject, or a password account). ``name`` is a valid person name of at most 56
        characters (the suffix must fit)."""
        async with self._db.transaction() as conn:
            await conn.execute(SQL.oidc_lock, issuer, subject)
            row = await conn.fetchrow(SQL.oidc_account, issuer, subject)
            if row is not None:
                return _account(row)
            for n in range(1, MAX_NAME_TRIES + 1):
                candidate = name if n == 1 else f"{name}-{n}"
                row = await conn.fetchrow(SQL.oidc_add_account, candidate, NO_PASSWORD)
                if row is not None:
                    break
            else:
                raise ValueError(f"no free name like {name!r}")
            account = _account(row)
            await conn.execute(SQL.oidc_link, issuer, subject, account.id)
        return account

    async def signing_key(self, candidate: bytes) -> bytes:
        """The shared cookie key: ``candidate`` if none existed yet, else the stored one."""
        async with self._db.transaction() as conn:
            await conn.execute(SQL.key_init, candidate)
            secret = await conn.fetchval(SQL.key)
        return bytes(secret)
