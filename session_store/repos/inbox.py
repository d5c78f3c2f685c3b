"""The inbox: each inbound event stored once, as a message of its session, an edit or deletion
of one (with what it asks of the answer: written again, or retracted), or a note of why it was
not (ignored, rejected); and each adapter's cursor."""

from __future__ import annotations

import time
from collections import OrderedDict
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
from session_store.values import EncodedJson

SQL = load(__package__, "inbox.sql")


#: dedupe keys this process stored lately, answered ``duplicate`` without a round trip
RECENT_KEYS = 8192
#: seconds a remembered key is believed: far inside the inbox's dedupe window (two days at
#: the least), so the database would answer the same
RECENT_SECONDS = 3600.0


class Inbox:
    def __init__(self, db: Database) -> None:
        self.db = db
        #: (platform, "event" | "message", key) -> when this process stored it: a platform
        #: that sends one post twice (Slack's app_mention and message) costs one transaction
        #: for it, not two. Another replica's keys are not here: the database dedupes those
        self._recent: OrderedDict[tuple[str, str, str], float] = OrderedDict()

    def _seen(self, msg: InboundMessage) -> bool:
        now = time.monotonic()
        for key in _keys(msg):
            at = self._recent.get(key)
            if at is not None and now - at < RECENT_SECONDS:
                return True
        return False

    def _remember(self, msg: InboundMessage) -> None:
        now = time.monotonic()
        for key in _keys(msg):
            self._recent[key] = now
            self._recent.move_to_end(key)
        while len(self._recent) > RECENT_KEYS:
            self._recent.popitem(last=False)

    async def ingest(self, item: InboundItem, *, raw: Mapping[str, Any] | None) -> IngestResult:
        """Store one inbound event in one transaction; see ``inbox.sql``, ``ingest_message``."""
        if isinstance(item, InboundNote):
            return await self._note(item, raw)
        if isinstance(item, InboundAnnotation):
            return await self._annotation(item, raw)
        if self._seen(item):
            return IngestResult(status="duplicate")
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.ingest_message, *_ingest_args(item, raw))
        if row is None:
            return IngestResult(status="duplicate")
        self._remember(item)
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
            rewrite = None
            retracted = 0
            if item.follow_up == "update" and item.kind == "edit" and item.content is not None:
                rewrite = await conn.fetchrow(SQL.request_rewrite, found["id"], item.content)
            elif item.follow_up == "retract" and item.kind == "delete":
                retracted = len(await conn.fetch(SQL.retract_answer, found["id"]))
        return IngestResult(
            status="accepted",
            session_id=found["session_id"],
            message_id=found["id"],
            # the answer is written again: a turn is asked for, like a question's
            turn_requested=rewrite is not None,
            seq_no=None if rewrite is None else rewrite["seq_no"],
            deliveries_queued=retracted,
            annotated_seq=found["seq_no"],
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
        msg.burst_seconds,
    )


def _keys(msg: InboundMessage) -> list[tuple[str, str, str]]:
    """The message's two dedupe keys (those it has), as the inbox's unique indexes hold them."""
    platform = msg.key.platform
    keys = []
    if msg.event_id is not None:
        keys.append((platform, "event", msg.event_id))
    if msg.message_key is not None:
        keys.append((platform, "message", msg.message_key))
    return keys


def _title(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:80]


def _jsonable(raw: Mapping[str, Any] | None) -> Any:
    if raw is None or type(raw) is EncodedJson:
        return raw
    return dict(raw)
