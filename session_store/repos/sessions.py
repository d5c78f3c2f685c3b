"""Sessions and their transcripts: finding and listing sessions, reading messages, closing a
session, and people's feedback on the bot's replies; voice notes' transcripts, kept on their
message (``TranscriptStore``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from session_store.db import Database
from session_store.errors import RequestError, SessionNotFound
from session_store.records import Checkpoint, DeliveryRecord, MessageRecord, SessionRecord
from session_store.repos.outbox import SQL as OUTBOX_SQL
from session_store.repos.outbox import delivery_from_row
from session_store.rows import reader
from session_store.sql import load
from session_store.values import SessionKey, SessionStatus

SQL = load(__package__, "sessions.sql")

_session = reader(SessionRecord)
_message = reader(MessageRecord)
_checkpoint = reader(Checkpoint)

#: each lifecycle step: the status it moves to, and the statuses it may start from
#: (``active <-> paused``, ``active|paused -> closed -> archived``)
TRANSITIONS: dict[str, tuple[SessionStatus, tuple[SessionStatus, ...]]] = {
    "pause": ("paused", ("active",)),
    "resume": ("active", ("paused",)),
    "close": ("closed", ("active", "paused")),
    "archive": ("archived", ("closed",)),
}


class Sessions:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def get_session(self, session_id: int) -> SessionRecord:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.get_session, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return _session(row)

    async def find_session(self, key: SessionKey) -> SessionRecord | None:
        """The active session for ``key``, else its newest closed one."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.find_session_by_key, key.platform, key.scope, key.chat_id, key.thread_id
            )
        return None if row is None else _session(row)

    async def has_active_session(self, key: SessionKey) -> bool:
        async with self.db.connection() as conn:
            found = await conn.fetchval(
                SQL.has_active_session, key.platform, key.scope, key.chat_id, key.thread_id
            )
        return bool(found)

    async def list_sessions(
        self,
        *,
        platform: str | None = None,
        chat_id: str | None = None,
        thread_id: str | None = None,
        status: SessionStatus | None = None,
        title_contains: str | None = None,
        topic_contains: str | None = None,
        min_priority: int | None = None,
        tags: Sequence[str] | None = None,
        after: tuple[datetime | None, int] | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """Newest activity first; ``after`` is the (last_message_at, id) of the last row of
        the previous page. ``tags``: sessions carrying every one of them; ``min_priority``:
        at least that priority."""
        pattern = None if not title_contains else _like_escape(title_contains)
        topic = None if not topic_contains else _like_escape(topic_contains)
        async with self.db.connection() as conn:
            rows = await conn.fetch(
                SQL.list_sessions,
                platform,
                chat_id,
                status,
                pattern,
                thread_id,
                after is not None,
                after[0] if after else None,
                after[1] if after else None,
                limit,
                topic,
                min_priority,
                list(tags) if tags else None,
            )
        return [_session(r) for r in rows]

    async def list_chats(self, platform: str, limit: int = 200) -> list[str]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.list_chats, platform, limit)
        return [r["chat_id"] for r in rows]

    async def close_session(self, session_id: int) -> bool:
        async with self.db.connection() as conn:
            return await conn.fetchval(SQL.close_active_session, session_id) is not None

    # --- lifecycle -----------------------------------------------------------------------

    async def transition(self, session_id: int, step: str) -> SessionRecord:
        """One lifecycle step (``pause``, ``resume``, ``close``, ``archive``; see
        :data:`TRANSITIONS`). A step the session's status does not allow is refused with a
        409 naming the status; an unknown session is :class:`SessionNotFound`."""
        if step not in TRANSITIONS:
            raise RequestError(f"unknown lifecycle step {step!r}; one of {', '.join(TRANSITIONS)}")
        to, starts = TRANSITIONS[step]
        return await self._change(
            session_id,
            SQL.move_status,
            (to, list(starts)),
            refused=lambda status: (
                f"session {session_id} is {status}; {step} needs it " + " or ".join(starts)
            ),
        )

    async def set_attributes(
        self,
        session_id: int,
        *,
        topic: str | None = None,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
    ) -> SessionRecord:
        """Set a session's topic, priority or tags (``None``: unchanged; ``tags``
        replaces the set). Archived sessions are read-only (409)."""
        if priority is not None and not -32768 <= priority <= 32767:
            raise RequestError(f"priority {priority} is out of range")
        clean = None if tags is None else sorted({t.strip() for t in tags if t.strip()})
        return await self._change(
            session_id,
            SQL.set_attributes,
            (topic, priority, clean),
            refused=lambda _: (
                f"session {session_id} is archived, and archived sessions are read-only"
            ),
        )

    async def _change(
        self,
        session_id: int,
        query: str,
        args: tuple[object, ...],
        *,
        refused: Callable[[str], str],
    ) -> SessionRecord:
        """Run ``query`` (an ``UPDATE`` of one session ``RETURNING`` it, ``$1`` its id) and
        answer the changed session. No row back: :class:`SessionNotFound` when there is no
        such session, else a 409 saying why (``refused(its status)``)."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(query, session_id, *args)
            if row is not None:
                return _session(row)
            current = await conn.fetchrow(SQL.get_session, session_id)
        if current is None:
            raise SessionNotFound(f"no session {session_id}")
        raise RequestError(refused(current["status"]), status=409, title="Conflict")

    async def decisions(
        self, session_id: int, *, limit: int = 200
    ) -> tuple[list[MessageRecord], list[Checkpoint]]:
        """A session's decisions (oldest first) and its unresolved checkpoints, each read
        from its partial index."""
        async with self.db.connection() as conn:
            found = await conn.fetchval(SQL.get_session_exists, session_id)
            if not found:
                raise SessionNotFound(f"no session {session_id}")
            rows = await conn.fetch(SQL.session_decisions, session_id, limit)
            checks = await conn.fetch(SQL.open_checkpoints, session_id)
        return [_message(r) for r in rows], [_checkpoint(r) for r in checks]

    # --- messages ------------------------------------------------------------------------

    async def messages(
        self,
        session_id: int,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        with_deliveries: bool = False,
        as_now: bool = False,
    ) -> list[MessageRecord]:
        """Messages in seq order: the first ``limit`` after ``after_seq``, or, with
        ``before_seq``, the last ``limit`` before it (and after ``after_seq`` when both are
        given). With ``with_deliveries`` each assistant message carries its delivery rows.
        ``as_now`` (with ``before_seq``): as people see the thread now, edited messages with
        their newest text and deleted ones marked (``deleted``)."""
        async with self.db.connection() as conn:
            if before_seq is not None:
                query = SQL.pending_before if as_now else SQL.messages_before
                newest = await conn.fetch(query, session_id, before_seq, limit, after_seq or 0)
                rows = list(reversed(newest))
            else:
                rows = await conn.fetch(SQL.messages_after, session_id, after_seq or 0, limit)
            messages = [_message(r) for r in rows]
            ids = [m.id for m in messages if m.role != "user"]
            if not with_deliveries or not ids:
                return messages
            # the outbox's rows, read with the outbox's statement
            drows = await conn.fetch(OUTBOX_SQL.deliveries_of_messages, ids)
        by_message: dict[int, list[DeliveryRecord]] = {}
        for d in (delivery_from_row(r) for r in drows):
            by_message.setdefault(d.message_id, []).append(d)
        return [
            replace(m, deliveries=tuple(by_message[m.id])) if m.id in by_message else m
            for m in messages
        ]

    async def recent(self, session_id: int, limit: int = 50) -> list[MessageRecord]:
        """The newest ``limit`` messages, oldest first."""
        return await self.messages(session_id, before_seq=2**63 - 1, limit=limit)

    async def delta(self, session_id: int, after_seq: int, limit: int = 100) -> list[MessageRecord]:
        """Up to ``limit`` messages after ``after_seq``, oldest first."""
        return await self.messages(session_id, after_seq=after_seq, limit=limit)

    async def pending(
        self, session_id: int, after_seq: int, limit: int = 100
    ) -> list[MessageRecord]:
        """``delta`` as a turn reads the messages it answers: an edited one with its newest
        text (the stored row keeps its first), a deleted one marked ``deleted``."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.pending_after, session_id, after_seq, limit)
        return [_message(r) for r in rows]

    async def message_id_at(self, session_id: int, seq_no: int) -> int | None:
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.message_id_at, session_id, seq_no)
        return None if value is None else int(value)

    # --- feedback on the bot's replies ---------------------------------------------------

    async def set_feedback(self, message_id: int, *, user_id: str, value: int) -> int | None:
        """One person's feedback on an assistant message: +1, -1, or 0 to take it back.
        Returns the message's resulting feedback (sign of the sum), ``None`` when nobody's
        is left. Raises ``SessionNotFound`` when ``message_id`` is not an assistant message."""
        if value not in (-1, 0, 1):
            raise ValueError("feedback must be -1, 0 or 1")
        async with self.db.transaction() as conn:
            # lock first: concurrent reactions on one message then recompute in turn
            if await conn.fetchval(SQL.lock_assistant_message, message_id) is None:
                raise SessionNotFound(f"no assistant message {message_id}")
            if value:
                await conn.execute(SQL.upsert_feedback, message_id, user_id, value)
            else:
                await conn.execute(SQL.delete_feedback, message_id, user_id)
            result = await conn.fetchval(SQL.refresh_feedback, message_id)
        return None if result is None else int(result)

    async def find_bot_message(
        self, platform: str, *, chat_id: str, platform_message_id: str
    ) -> int | None:
        """The assistant message a platform message id belongs to (for reactions)."""
        async with self.db.connection() as conn:
            value = await conn.fetchval(
                SQL.find_message_by_platform_id, platform, platform_message_id, chat_id
            )
        return None if value is None else int(value)

    async def feedback_by_seq(self, session_id: int) -> dict[int, int]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.feedback_by_seq, session_id)
        return {r["seq_no"]: r["feedback"] for r in rows}


class TranscriptStore:
    """Transcripts of voice notes and audio, stored on the message they were shared with."""

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


def _like_escape(text: str) -> str:
    """``text`` as a literal inside ILIKE (``%`` and ``_`` are not wildcards here)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
