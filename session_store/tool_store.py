"""The store's tools area: reads the built-in tools make on behalf of the asker."""

from __future__ import annotations

from session_store import tool_queries as q
from session_store.records import SessionRecord
from session_store.store import Store


class ToolStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._db = store.db

    async def asker_sessions(
        self, *, platform: str, scope: str, user_id: str, limit: int = 20
    ) -> list[SessionRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(q.ASKER_SESSIONS, platform, scope, user_id, limit)
        return [SessionRecord.from_row(r) for r in rows]

    async def takes_part(self, session_id: int, *, platform: str, scope: str, user_id: str) -> bool:
        async with self._db.connection() as conn:
            found = await conn.fetchval(q.TAKES_PART, session_id, platform, scope, user_id)
        return bool(found)
