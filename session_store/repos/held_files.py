"""Files a surface keeps itself (see ``held_files.sql``): ``gateway.core.ports.HeldFiles``."""

from __future__ import annotations

from session_store.db import Database
from session_store.sql import load

SQL = load(__package__, "held_files.sql")


class HeldFileStore:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def keep(self, name: str, media_type: str | None, data: bytes) -> int:
        async with self._db.connection() as conn:
            file_id: int = await conn.fetchval(SQL.keep_file, name, media_type, len(data), data)
        return file_id

    async def read(self, file_id: int, *, max_bytes: int) -> tuple[int, bytes | None] | None:
        """``(size, bytes)``, the bytes ``None`` past ``max_bytes``; ``None``: no such file."""
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.read_file, file_id, max_bytes)
        if row is None:
            return None
        return row["size_bytes"], row["content"]
