"""Transcripts of voice notes, stored on their message (see ``transcripts.sql``)."""

from __future__ import annotations

from session_store.db import Database
from session_store.sql import load

SQL = load(__package__, "transcripts.sql")


class TranscriptStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def transcript(self, message_id: int) -> str | None:
        """The message's stored transcript, if it was transcribed."""
        async with self._db.connection() as conn:
            found = await conn.fetchval(SQL.transcript, message_id)
        return found if isinstance(found, str) else None

    async def save(self, message_id: int, text: str) -> str:
        """Store ``text`` as the message's transcript unless one is stored already; the
        transcript the message keeps (the first one)."""
        async with self._db.transaction() as conn:
            if await conn.fetchval(SQL.save_transcript, message_id, text) is not None:
                return text
            found = await conn.fetchval(SQL.transcript, message_id)
        return found if isinstance(found, str) else text
