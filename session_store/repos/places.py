"""Which platforms and places the gateway has seen (a session exists there): what checks an
account or a schedule's place typed by an operator (``gateway.core.places``)."""

from __future__ import annotations

from session_store.db import Database
from session_store.sql import load
from session_store.values import SessionKey

SQL = load(__package__, "places.sql")


class PlacesSeen:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def platform_seen(self, platform: str) -> bool:
        """A message came from ``platform`` (or a first post went there)."""
        async with self.db.connection() as conn:
            return bool(await conn.fetchval(SQL.platform_seen, platform))

    async def place_seen(self, key: SessionKey) -> tuple[bool, bool]:
        """Whether the place's chat was seen, and its thread (``True`` without one)."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.place_seen, key.platform, key.scope, key.chat_id, key.thread_id
            )
        assert row is not None
        return bool(row["chat_seen"]), bool(row["thread_seen"])
