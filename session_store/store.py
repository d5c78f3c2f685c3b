"""The session store: typed methods over the pool. Callers never see SQL or driver records,
and never a driver error: ``Database`` translates them at its one boundary."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import structlog

from session_store import previews as previews_q
from session_store import queries as q
from session_store.db import Database
from session_store.errors import LeaseLost, SessionNotFound
from session_store.records import (
    ContextRecord,
    DeliveryRecord,
    FinishedTurn,
    InboundAnnotation,
    InboundItem,
    InboundMessage,
    InboundNote,
    IngestResult,
    MessageRecord,
    OutgoingReply,
    PrefetchedContext,
    SessionRecord,
    SummaryRecord,
    TurnClaim,
    TurnState,
)
from session_store.values import ReplyTarget, SessionKey, SessionStatus, StoredPart, as_stored

log = structlog.get_logger(__name__)


class Store:
    """Sessions, messages, turns, deliveries and cursors: the gateway's hot path."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: this process's id while it holds its liveness lock (``session_store.liveness``);
        #: recorded on the turns and deliveries it claims, so that they are taken over at
        #: once if it dies. None: claims carry no process and wait for their lease.
        self.process_id: int | None = None

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 2, max_size: int = 10) -> Store:
        return cls(await Database.connect(dsn, min_size=min_size, max_size=max_size))

    @property
    def dsn(self) -> str:
        return self.db.dsn

    async def close(self) -> None:
        await self.db.close()

    async def ping(self) -> None:
        await self.db.ping()

    # --- ingest --------------------------------------------------------------------------

    async def ingest(self, item: InboundItem, *, raw: Mapping[str, Any] | None) -> IngestResult:
        """Store one inbound event in one transaction; see ``queries.INGEST_MESSAGE``."""
        if isinstance(item, InboundNote):
            async with self.db.connection() as conn:
                row_id = await conn.fetchval(
                    q.INSERT_INBOUND,
                    item.platform,
                    item.event_id,
                    None,
                    item.status,
                    item.reason,
                    _jsonable(raw),
                )
            return IngestResult(
                status=item.status if row_id is not None else "duplicate", reason=item.reason
            )
        if isinstance(item, InboundAnnotation):
            return await self._ingest_annotation(item, raw)
        async with self.db.connection() as conn:
            row = await conn.fetchrow(q.INGEST_MESSAGE, *_ingest_args(item, raw))
        if row is None:
            return IngestResult(status="duplicate")
        return IngestResult(
            status="accepted",
            session_id=row["session_id"],
            message_id=row["id"],
            seq_no=row["seq_no"],
            turn_requested=row["trigger"] == "answer",
        )

    async def _ingest_annotation(
        self, item: InboundAnnotation, raw: Mapping[str, Any] | None
    ) -> IngestResult:
        async with self.db.transaction() as conn:
            found = await conn.fetchrow(q.FIND_MESSAGE_BY_KEY, item.platform, item.message_key)
            reason = None if found else f"{item.kind} of unknown message"
            inbox_id = await conn.fetchval(
                q.INSERT_INBOUND,
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
                q.INSERT_ANNOTATION,
                found["id"],
                item.kind,
                item.content,
                {"event_id": item.event_id},
            )
            if item.kind == "edit":
                await conn.execute(q.MARK_EDITED, found["id"])
        return IngestResult(
            status="accepted", session_id=found["session_id"], message_id=found["id"]
        )

    async def has_active_session(self, key: SessionKey) -> bool:
        async with self.db.connection() as conn:
            return bool(
                await conn.fetchval(
                    q.HAS_ACTIVE_SESSION, key.platform, key.scope, key.chat_id, key.thread_id
                )
            )

    # --- reading -------------------------------------------------------------------------

    async def messages(
        self,
        session_id: int,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        with_deliveries: bool = False,
    ) -> list[MessageRecord]:
        """Messages in seq order: the first ``limit`` after ``after_seq``, or, with
        ``before_seq``, the last ``limit`` before it. With ``with_deliveries`` each assistant
        message carries its delivery rows."""
        async with self.db.connection() as conn:
            if before_seq is not None:
                rows = list(
                    reversed(await conn.fetch(q.MESSAGES_BEFORE, session_id, before_seq, limit))
                )
            else:
                rows = await conn.fetch(q.MESSAGES_AFTER, session_id, after_seq or 0, limit)
            messages = [MessageRecord.from_row(r) for r in rows]
            ids = [m.id for m in messages if m.role != "user"]
            if not with_deliveries or not ids:
                return messages
            drows = await conn.fetch(q.DELIVERIES_OF_MESSAGES, ids)
        by_message: dict[int, list[DeliveryRecord]] = {}
        for d in (DeliveryRecord.from_row(r) for r in drows):
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

    async def get_session(self, session_id: int) -> SessionRecord:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(q.GET_SESSION, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return SessionRecord.from_row(row)

    async def find_session(self, key: SessionKey) -> SessionRecord | None:
        """The active session for ``key``, else its newest closed one."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                q.FIND_SESSION_BY_KEY, key.platform, key.scope, key.chat_id, key.thread_id
            )
        return None if row is None else SessionRecord.from_row(row)

    async def list_sessions(
        self,
        *,
        platform: str | None = None,
        chat_id: str | None = None,
        thread_id: str | None = None,
        status: SessionStatus | None = None,
        title_contains: str | None = None,
        after: tuple[datetime | None, int] | None = None,
        limit: int = 50,
    ) -> list[SessionRecord]:
        """Newest activity first; ``after`` is the (last_message_at, id) of the last row of
        the previous page."""
        pattern = None if not title_contains else _like_escape(title_contains)
        async with self.db.connection() as conn:
            rows = await conn.fetch(
                q.LIST_SESSIONS,
                platform,
                chat_id,
                status,
                pattern,
                thread_id,
                after is not None,
                after[0] if after else None,
                after[1] if after else None,
                limit,
            )
        return [SessionRecord.from_row(r) for r in rows]

    async def list_chats(self, platform: str, limit: int = 200) -> list[str]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(q.LIST_CHATS, platform, limit)
        return [r["chat_id"] for r in rows]

    async def close_session(self, session_id: int) -> bool:
        async with self.db.connection() as conn:
            return await conn.fetchval(q.CLOSE_ACTIVE_SESSION, session_id) is not None

    # --- turns ---------------------------------------------------------------------------

    async def claim_turn(
        self,
        *,
        lease_seconds: float,
        platforms: Sequence[str] | None = None,
        with_pending: int = 0,
        context_page: int = 0,
    ) -> TurnClaim | None:
        """Claim one session whose turn is due. With ``with_pending`` its first unanswered
        messages (up to that many) come in the same round trip, as ``TurnClaim.pending``
        (None when the statement's snapshot missed the newest: read ``delta`` then); with
        ``context_page`` also the turn's state and newest context page
        (``TurnClaim.context``)."""
        owner = str(uuid.uuid4())
        plats = None if platforms is None else list(platforms)
        async with self.db.connection() as conn:
            if with_pending <= 0:
                row = await conn.fetchrow(
                    q.CLAIM_TURN, owner, lease_seconds, plats, self.process_id
                )
                rows = [] if row is None else [row]
            elif context_page <= 0:
                rows = await conn.fetch(
                    q.CLAIM_TURN_PENDING,
                    owner,
                    lease_seconds,
                    plats,
                    self.process_id,
                    with_pending,
                )
            else:
                rows = await conn.fetch(
                    q.CLAIM_TURN_CONTEXT,
                    owner,
                    lease_seconds,
                    plats,
                    self.process_id,
                    with_pending,
                    context_page,
                )
        if not rows:
            return None
        row = rows[0]
        pending: tuple[MessageRecord, ...] | None = None
        context: PrefetchedContext | None = None
        if with_pending > 0:
            found = tuple(MessageRecord.from_row(r) for r in rows if r["id"] is not None)
            complete = bool(found) and found[-1].seq_no >= row["turn_requested_seq"]
            pending = found if complete else None
            if complete and context_page > 0 and row["question_seq"] is not None:
                context = PrefetchedContext(
                    question_seq=row["question_seq"],
                    upto_seq=row["upto_seq"],
                    state=TurnState.from_row(
                        {
                            **{k: row[k] for k in _STATE_COLUMNS},
                            "metadata": row["session_metadata"],
                            "title": row["session_title"],
                        }
                    ),
                    after_seq=row["summary_to_seq"] or 0,
                    limit=context_page,
                    page=tuple(ContextRecord.from_row(r) for r in row["context_page"] or ()),
                )
        return TurnClaim(
            session_id=row["claim_session_id"] if with_pending > 0 else row["id"],
            key=SessionKey.from_row(row),
            owner=owner,
            done_seq=row["turn_done_seq"],
            requested_seq=row["turn_requested_seq"],
            selected_model=row["selected_model"],
            status=row["status"],
            pending=pending,
            context=context,
            parked_seq=row["turn_parked_seq"],
        )

    async def renew_turn(self, claim: TurnClaim, *, lease_seconds: float) -> None:
        async with self.db.connection() as conn:
            ok = await conn.fetchval(q.RENEW_TURN, claim.session_id, claim.owner, lease_seconds)
        if ok is None:
            raise LeaseLost(f"turn lease of session {claim.session_id} was taken over")

    async def release_turn(self, claim: TurnClaim) -> None:
        async with self.db.connection() as conn:
            await conn.execute(q.RELEASE_TURN, claim.session_id, claim.owner)

    async def finish_turn(
        self,
        claim: TurnClaim,
        *,
        handled_seq: int,
        replies: Sequence[OutgoingReply],
        target: ReplyTarget | None,
        close_session: bool = False,
        previews_after: int | None = None,
    ) -> list[int]:
        """Record the turn's replies and their delivery rows (the outbox) in one transaction,
        only while ``claim`` still owns the session. Returns the new messages' seq numbers.

        ``previews_after``: the turn streamed previews (stored under that ``after_seq``); they
        are bound to the last delivered reply in the same transaction, so its delivery edits
        them into the final text (``session_store.previews``)."""
        done = await self.finish_turn_outbox(
            claim,
            handled_seq=handled_seq,
            replies=replies,
            target=target,
            close_session=close_session,
            previews_after=previews_after,
        )
        return done.seqs

    async def finish_turn_outbox(
        self,
        claim: TurnClaim,
        *,
        handled_seq: int,
        replies: Sequence[OutgoingReply],
        target: ReplyTarget | None,
        close_session: bool = False,
        hand_over: bool = False,
        lease_seconds: float = 60.0,
        previews_after: int | None = None,
    ) -> FinishedTurn:
        """``finish_turn`` in one statement (``queries.FINISH_TURN_OUTBOX``). With
        ``hand_over`` the first delivery part comes back claimed for this process when it is
        next in its session's order; the caller must send it (or hand it back). A streamed
        turn (``previews_after``) binds its previews in the same transaction."""
        if replies and target is None:
            raise ValueError("replies need a target")
        ords: list[int] = []
        parts: list[int] = []
        stored: list[StoredPart] = []
        for n, out in enumerate(replies, start=1):
            for part_no, part in enumerate(out.parts, start=1):
                ords.append(n)
                parts.append(part_no)
                stored.append(as_stored(part))
        # one statement; a streamed turn also binds its previews, in the same transaction
        opened = self.db.connection() if previews_after is None else self.db.transaction()
        async with opened as conn:
            rows = await conn.fetch(
                q.FINISH_TURN_OUTBOX,
                claim.session_id,
                claim.owner,
                len(replies),
                handled_seq,
                bool(replies),
                close_session,
                claim.done_seq,
                [r.content for r in replies],
                [r.model for r in replies],
                [r.tokens_used for r in replies],
                [dict(r.metadata) for r in replies],
                [r.role for r in replies],
                None if target is None else target.platform,
                None if target is None else target.to_json(),
                hand_over and bool(stored),
                ords,
                parts,
                lease_seconds,
                self.process_id,
                [p.content for p in stored],
                [p.kind for p in stored],
                [dict(p.part) for p in stored],
                [p.data for p in stored],
            )
            if not rows:
                raise LeaseLost(f"turn lease of session {claim.session_id} was taken over")
            last = rows[0]["last_seq_no"]
            seqs = list(range(last - len(replies) + 1, last + 1))
            if previews_after is not None:
                shown = [(s, out) for s, out in zip(seqs, replies, strict=True) if out.parts]
                if shown:
                    seq, out = shown[-1]
                    await conn.execute(
                        previews_q.BIND, claim.session_id, previews_after, seq, len(out.parts)
                    )
        handed = tuple(DeliveryRecord.from_row(r) for r in rows if r["id"] is not None)
        return FinishedTurn(
            seqs=seqs, deliveries=rows[0]["written"], handed=handed, more=rows[0]["more"]
        )

    # --- deliveries ----------------------------------------------------------------------

    async def claim_deliveries(
        self, *, platforms: Sequence[str], lease_seconds: float, limit: int = 1
    ) -> list[DeliveryRecord]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(
                q.CLAIM_DELIVERIES, lease_seconds, list(platforms), limit, self.process_id
            )
        return [DeliveryRecord.from_row(r) for r in rows]

    # The writes below are fenced by the claim: they raise ``LeaseLost`` (and change nothing)
    # when the delivery is no longer held by ``delivery``'s claim.

    async def _fenced(self, query: str, delivery: DeliveryRecord, *args: Any) -> None:
        async with self.db.connection() as conn:
            row_id = await conn.fetchval(query, delivery.id, _token(delivery), *args)
        if row_id is None:
            raise LeaseLost(f"delivery {delivery.id} is no longer held by this claim")

    async def renew_delivery(self, delivery: DeliveryRecord, *, lease_seconds: float) -> None:
        await self._fenced(q.RENEW_DELIVERY, delivery, lease_seconds)

    async def mark_pacing(
        self, delivery: DeliveryRecord, *, wait: float, lease_seconds: float = 0.0
    ) -> None:
        """The claim waits ``wait`` seconds (for its chat's pacer or a free worker), nothing
        of it on the wire: recovery may resend it anywhere should its process die now
        (migration 0014). Its lease is kept at least ``lease_seconds`` past the wait."""
        await self._fenced(q.MARK_PACING, delivery, wait, lease_seconds)

    async def mark_on_wire(self, delivery: DeliveryRecord) -> None:
        """The wait is over and the request goes out next: from here the send may reach the
        platform, so recovery treats it as in flight again."""
        await self._fenced(q.MARK_ON_WIRE, delivery)

    async def mark_sent(self, delivery: DeliveryRecord, platform_message_id: str | None) -> bool:
        """Fenced like the others; True when parts of the session wait behind this one."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                q.MARK_SENT, delivery.id, _token(delivery), platform_message_id
            )
        if row is None:
            raise LeaseLost(f"delivery {delivery.id} is no longer held by this claim")
        return bool(row["more"])

    async def mark_retry(self, delivery: DeliveryRecord, *, delay: float, error: str) -> None:
        await self._fenced(q.MARK_RETRY, delivery, delay, error)

    async def mark_failed(
        self, delivery: DeliveryRecord, error: str, *, ambiguous: bool = False
    ) -> None:
        await self._fenced(q.MARK_FAILED, delivery, error, ambiguous)

    async def recover_expired_sends(
        self,
        *,
        idempotent_platforms: Sequence[str],
        other_platforms: Sequence[str],
        windowed_platforms: Mapping[str, float] | None = None,
    ) -> tuple[int, int]:
        """Sends whose worker died mid-flight. One still waiting for pacing sent nothing: it
        is requeued whatever the platform. Where a resend cannot double-post (idempotency
        key), requeue them; elsewhere the platform may already show the message, so mark them
        failed as ambiguous rather than risk a duplicate. ``windowed_platforms``: platforms
        whose key is remembered only so many seconds after the send; a send claimed more
        recently than that is requeued (it began after its claim), an older one is ambiguous.
        Returns (requeued, failed)."""
        requeued = failed = 0
        windows = dict(windowed_platforms or {})
        platforms = [*idempotent_platforms, *other_platforms, *windows]
        async with self.db.transaction() as conn:
            rows = await conn.fetch(q.EXPIRED_SENDING, platforms)
            for row in rows:
                window = windows.get(row["platform"])
                age = row["claim_age"]
                within = window is not None and age is not None and age < window
                # one waiting for pacing sent nothing: resent on any platform
                if row["pacing"] or row["platform"] in idempotent_platforms or within:
                    reason = (
                        "requeued: the worker stopped while it waited for pacing (not sent)"
                        if row["pacing"]
                        else "requeued: worker stopped during send"
                    )
                    await conn.execute(q.REQUEUE_DELIVERY, row["id"], reason)
                    requeued += 1
                else:
                    await conn.execute(
                        q.MARK_AMBIGUOUS,
                        row["id"],
                        "ambiguous: the worker stopped during the send; the platform may or "
                        "may not show it (retry from the admin API if it does not)",
                    )
                    failed += 1
        return requeued, failed

    async def retry_failed_delivery(self, delivery_id: int) -> bool:
        async with self.db.connection() as conn:
            return await conn.fetchval(q.RETRY_FAILED_DELIVERY, delivery_id) is not None

    async def deliveries_for_session(self, session_id: int) -> list[DeliveryRecord]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(q.DELIVERIES_FOR_SESSION, session_id)
        return [DeliveryRecord.from_row(r) for r in rows]

    async def delivery_counts(self) -> dict[str, int]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(q.DELIVERY_COUNTS)
        return {r["status"]: r["n"] for r in rows}

    async def oldest_pending_delivery_age(self) -> float | None:
        async with self.db.connection() as conn:
            value = await conn.fetchval(q.OLDEST_PENDING_AGE)
        return None if value is None else float(value)

    # --- adapter cursors -----------------------------------------------------------------

    async def load_cursor(self, name: str) -> str | None:
        async with self.db.connection() as conn:
            value = await conn.fetchval(q.LOAD_CURSOR, name)
        return None if value is None else str(value)

    async def save_cursor(self, name: str, value: str) -> None:
        async with self.db.connection() as conn:
            await conn.execute(q.SAVE_CURSOR, name, value)

    # --- agent runtime: context, summaries, model choice, feedback -----------------------

    async def turn_state(
        self,
        session_id: int,
        *,
        question_seq: int,
        upto_seq: int,
        user_platform: str,
        user_id: str | None,
    ) -> TurnState:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                q.TURN_STATE, session_id, question_seq, user_platform, user_id, upto_seq
            )
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return TurnState.from_row(row)

    async def context_page(
        self,
        session_id: int,
        *,
        after_seq: int,
        upto_seq: int,
        limit: int,
        newest_first: bool = True,
    ) -> list[ContextRecord]:
        """Context messages with ``after_seq < seq_no <= upto_seq``, newest or oldest first."""
        sql = q.CONTEXT_NEWEST_FIRST if newest_first else q.CONTEXT_OLDEST_FIRST
        async with self.db.connection() as conn:
            rows = await conn.fetch(sql, session_id, after_seq, upto_seq, limit)
        return [ContextRecord.from_values(r) for r in rows]

    async def latest_summary(self, session_id: int) -> SummaryRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(q.LATEST_SUMMARY, session_id)
        return None if row is None else SummaryRecord.from_row(row)

    async def summaries(self, session_id: int) -> list[SummaryRecord]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(q.LIST_SUMMARIES, session_id)
        return [SummaryRecord.from_row(r) for r in rows]

    async def add_summary(
        self,
        session_id: int,
        *,
        from_seq: int,
        to_seq: int,
        content: str,
        model: str | None,
        model_written: bool,
    ) -> SummaryRecord | None:
        """Store a summary of ``from_seq..to_seq``; ``None`` if one reaching as far exists."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                q.INSERT_ROLLING_SUMMARY,
                session_id,
                from_seq,
                to_seq,
                content,
                model,
                model_written,
            )
        return None if row is None else SummaryRecord.from_row(row)

    async def set_model_choice(
        self, session_id: int, *, platform: str, user_id: str | None, model: str
    ) -> None:
        """``/model NAME``: this session's model, and this person's choice for new ones."""
        async with self.db.transaction() as conn:
            await conn.execute(q.SET_SESSION_MODEL, session_id, model)
            if user_id:
                await conn.execute(q.SET_USER_MODEL, platform, user_id, model)

    async def turn_requested_seq(self, session_id: int) -> int:
        async with self.db.connection() as conn:
            value = await conn.fetchval(q.TURN_REQUESTED_SEQ, session_id)
        if value is None:
            raise SessionNotFound(f"no session {session_id}")
        return int(value)

    async def set_feedback(self, message_id: int, *, user_id: str, value: int) -> int | None:
        """One person's feedback on an assistant message: +1, -1, or 0 to take it back.
        Returns the message's resulting feedback (sign of the sum), ``None`` when nobody's
        is left. Raises ``SessionNotFound`` when ``message_id`` is not an assistant message."""
        if value not in (-1, 0, 1):
            raise ValueError("feedback must be -1, 0 or 1")
        async with self.db.transaction() as conn:
            # lock first: concurrent reactions on one message then recompute in turn
            if await conn.fetchval(q.LOCK_ASSISTANT_MESSAGE, message_id) is None:
                raise SessionNotFound(f"no assistant message {message_id}")
            if value:
                await conn.execute(q.UPSERT_FEEDBACK, message_id, user_id, value)
            else:
                await conn.execute(q.DELETE_FEEDBACK, message_id, user_id)
            result = await conn.fetchval(q.REFRESH_FEEDBACK, message_id)
        return None if result is None else int(result)

    async def find_bot_message(
        self, platform: str, *, chat_id: str, platform_message_id: str
    ) -> int | None:
        """The assistant message a platform message id belongs to (for reactions)."""
        async with self.db.connection() as conn:
            value = await conn.fetchval(
                q.FIND_MESSAGE_BY_PLATFORM_ID, platform, platform_message_id, chat_id
            )
        return None if value is None else int(value)

    async def message_id_at(self, session_id: int, seq_no: int) -> int | None:
        async with self.db.connection() as conn:
            value = await conn.fetchval(q.MESSAGE_ID_AT, session_id, seq_no)
        return None if value is None else int(value)

    async def feedback_by_seq(self, session_id: int) -> dict[int, int]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(q.FEEDBACK_BY_SEQ, session_id)
        return {r["seq_no"]: r["feedback"] for r in rows}


#: the columns of ``queries.CLAIM_TURN_CONTEXT`` that ``TurnState.from_row`` reads as they are
_STATE_COLUMNS = (
    "selected_model",
    "user_model",
    "place",
    "summary_id",
    "summary_session_id",
    "summary_from_seq",
    "summary_to_seq",
    "summary_content",
    "summary_model",
    "summary_model_written",
    "summary_created_at",
)


def _ingest_args(msg: InboundMessage, raw: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """The parameters of ``queries.INGEST_MESSAGE`` for one message."""
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
    )


def _token(delivery: DeliveryRecord) -> uuid.UUID:
    if delivery.claim_token is None:
        raise LeaseLost(f"delivery {delivery.id} was not claimed")
    return uuid.UUID(delivery.claim_token)


def _title(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:80]


def _jsonable(raw: Mapping[str, Any] | None) -> Any:
    return None if raw is None else dict(raw)


def _like_escape(text: str) -> str:
    """``text`` as a literal inside ILIKE (``%`` and ``_`` are not wildcards here)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
