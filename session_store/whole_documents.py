"""Whole documents for a turn (see ``whole_documents.sql``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from session_store.db import Database
from session_store.sql import load

SQL = load(__package__, "whole_documents.sql")


class WholeDocuments:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def passages(self, document_ids: Sequence[int]) -> list[Mapping[str, Any]]:
        """Every passage of the documents (ready ones), in the given order of documents and
        in reading order within each: ``chunk_id, document_id, page, section, content,
        ordinal, tokens, document_name, kb_name``."""
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.document_passages, list(document_ids))
        return [dict(r) for r in rows]
