"""Web chat accounts (``GATEWAY_WEB_AUTH=accounts``) and the key that signs their cookies.

The store keeps names, password hashes (made and checked by the core; never plain text) and
the time before which a person's session cookies no longer count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from session_store.db import Database

_ADD = """
INSERT INTO web_accounts (name, password_hash) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE
    SET password_hash = EXCLUDED.password_hash, sessions_valid_after = now()
RETURNING id, name, password_hash, created_at, sessions_valid_after
"""
_GET = """
SELECT id, name, password_hash, created_at, sessions_valid_after
FROM web_accounts WHERE name = $1
"""
_LIST = """
SELECT id, name, password_hash, created_at, sessions_valid_after
FROM web_accounts ORDER BY name
"""
_REMOVE = "DELETE FROM web_accounts WHERE name = $1"
_REVOKE = "UPDATE web_accounts SET sessions_valid_after = now() WHERE name = $1"
_KEY_INIT = "INSERT INTO web_auth_keys (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING"
_KEY = "SELECT secret FROM web_auth_keys WHERE id = 1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    id: int
    name: str
    password_hash: str
    created_at: datetime
    #: cookies issued before this are no longer valid
    sessions_valid_after: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Account:
        return cls(
            id=row["id"],
            name=row["name"],
            password_hash=row["password_hash"],
            created_at=row["created_at"],
            sessions_valid_after=row["sessions_valid_after"],
        )


class AccountStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, name: str, password_hash: str) -> Account:
        """Create the account, or give an existing one a new password (which signs it out
        everywhere)."""
        async with self._db.connection() as conn:
            row = await conn.fetchrow(_ADD, name, password_hash)
        assert row is not None
        return Account.from_row(row)

    async def get(self, name: str) -> Account | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(_GET, name)
        return None if row is None else Account.from_row(row)

    async def list(self) -> list[Account]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(_LIST)
        return [Account.from_row(r) for r in rows]

    async def remove(self, name: str) -> bool:
        async with self._db.connection() as conn:
            status = await conn.execute(_REMOVE, name)
        return str(status).endswith(" 1")

    async def revoke_sessions(self, name: str) -> None:
        """Every cookie issued to ``name`` until now stops counting (sign-out)."""
        async with self._db.connection() as conn:
            await conn.execute(_REVOKE, name)

    async def signing_key(self, candidate: bytes) -> bytes:
        """The shared cookie key: ``candidate`` if none existed yet, else the stored one."""
        async with self._db.transaction() as conn:
            await conn.execute(_KEY_INIT, candidate)
            secret = await conn.fetchval(_KEY)
        return bytes(secret)
