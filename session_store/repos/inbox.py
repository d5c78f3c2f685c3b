"""The inbox: each inbound event stored once, as a message of its session, an edit or deletion
of one, or a note of why it was not (ignored, rejected); and each adapter's cursor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from session_store.db import Database
from session_store.records import (
    InboundAnnotation,
    InboundItem,
    InboundMessage,
    InboundNote,
    IngestResult,
)
from session_store.sql import load

SQL = load(__package__, "inbox.sql")


class Inbox:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def ingest(self, item: InboundItem, *, raw: Mapping[str, Any] | None) -> IngestResult:
        """Store one inbound event in one transaction; see ``inbox.sql``, ``ingest_message``."""
        if isinstance(item, InboundNote):
            return await self._note(item, raw)
        if isinstance(item, InboundAnnotation):
            return await self._annotation(item, raw)
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.ingest_message, *_ingest_args(item, raw))
        if row is None:
            return IngestResult(status="duplicate")
        return IngestResult(
            status="accepted",
            session_id=row["session_id"],
            message_id=row["id"],
            seq_no=row["seq_no"],
            turn_requested=row["trigger"] == "answer",
        )

    async def _note(self, item: InboundNote, raw: Mapping[str, Any] | None) -> IngestResult:
        async with self.db.connection() as conn:
            row_id = await conn.fetchval(
                SQL.insert_inbound,
                item.platform,
                item.event_id,
                None,
                item.status,
                item.reason,
                _jsonable(raw),
            )
        status = item.status if row_id is not None else "duplicate"
        return IngestResult(status=status, reason=item.reason)

    async def _annotation(
        self, item: InboundAnnotation, raw: Mapping[str, Any] | None
    ) -> IngestResult:
        async with self.db.transaction() as conn:
            found = await conn.fetchrow(SQL.find_message_by_key, item.platform, item.message_key)
            reason = None if found else f"{item.kind} of unknown message"
            inbox_id = await conn.fetchval(
                SQL.insert_inbound,
                item.platform,
                item.event_id,
                None,
                "accepted" if found else "ignored",
                reason,
                _jsonable(raw),
            )
            if inbox_id is None:
                return IngestResult(status="duplicate")
            if found is None:
                return IngestResult(status="ignored", reason=reason)
            await conn.execute(
                SQL.insert_annotation,
                found["id"],
                item.kind,
                item.content,
                {"event_id": item.event_id},
            )
            if item.kind == "edit":
                await conn.execute(SQL.mark_edited, found["id"])
        return IngestResult(
            status="accepted", session_id=found["session_id"], message_id=found["id"]
        )

    # --- adapter cursors -----------------------------------------------------------------

    async def load_cursor(self, name: str) -> str | None:
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.load_cursor, name)
        return None if value is None else str(value)

    async def save_cursor(self, name: str, value: str) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.save_cursor, name, value)


def _ingest_args(msg: InboundMessage, raw: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """The parameters of ``ingest_message`` for one message."""
    return (
        msg.key.platform,
        msg.event_id,
        msg.message_key,
        _jsonable(raw),
        msg.key.scope,
        msg.key.chat_id,
        msg.key.thread_id,
        msg.turn_request,
        _title(msg.content),
        msg.sender_id,
        msg.sender_name,
        msg.external_id,
        msg.reply_to_external_id,
        msg.content,
        msg.target.to_json(),
        msg.command,
        msg.backfill,
        msg.sent_at,
        dict(msg.metadata),
        msg.traceparent,
    )


def _title(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:80]


def _jsonable(raw: Mapping[str, Any] | None) -> Any:
    return None if raw is None else dict(raw)
