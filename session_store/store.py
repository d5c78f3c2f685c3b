"""The session store: a thin facade over one repository per area (``session_store.repos``),
plus the outbox's writes until they move into a repository of their own. Callers never see
SQL or driver records, and never a driver error: ``Database`` translates them at its one
boundary."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from session_store import previews as previews_q
from session_store import queries as q
from session_store.db import Database
from session_store.errors import LeaseLost
from session_store.records import (
    ContextRecord,
    DeliveryRecord,
    FinishedTurn,
    InboundItem,
    IngestResult,
    MessageRecord,
    OutgoingReply,
    SessionRecord,
    SummaryRecord,
    TurnClaim,
    TurnState,
)
from session_store.repos.inbox import Inbox
from session_store.repos.people import People
from session_store.repos.sessions import Sessions
from session_store.repos.summaries import Summaries
from session_store.repos.turns import Turns
from session_store.repos.usage import Usage, UsageCharge, charge_columns, place_of
from session_store.values import ReplyTarget, SessionKey, SessionStatus, StoredPart, as_stored

log = structlog.get_logger(__name__)


class Store:
    """Sessions, messages, turns, deliveries and cursors: the gateway's hot path. Each area
    is a repository (``inbox``, ``sessions``, ``turns``, ``summaries``); the methods below
    keep their names for the callers."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.inbox = Inbox(db)
        self.sessions = Sessions(db)
        self.turns = Turns(db)
        self.summary_repo = Summaries(db)
        self.people = People(db)
        self.usage = Usage(db)
        self._process_id: int | None = None

    @property
    def process_id(self) -> int | None:
        """This process's id while it holds its liveness lock (``session_store.liveness``);
        recorded on the turns and deliveries it claims, so that they are taken over at once
        if it dies. None: claims carry no process and wait for their lease."""
        return self._process_id

    @process_id.setter
    def process_id(self, value: int | None) -> None:
        self._process_id = value
        self.turns.process_id = value

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

    # --- the inbox (``repos.inbox``) -------------------------------------------------------

    async def ingest(self, item: InboundItem, *, raw: Mapping[str, Any] | None) -> IngestResult:
        return await self.inbox.ingest(item, raw=raw)

    async def load_cursor(self, name: str) -> str | None:
        return await self.inbox.load_cursor(name)

    async def save_cursor(self, name: str, value: str) -> None:
        await self.inbox.save_cursor(name, value)

    # --- sessions and messages (``repos.sessions``) ----------------------------------------

    async def has_active_session(self, key: SessionKey) -> bool:
        return await self.sessions.has_active_session(key)

    async def messages(
        self,
        session_id: int,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        with_deliveries: bool = False,
    ) -> list[MessageRecord]:
        return await self.sessions.messages(
            session_id,
            after_seq=after_seq,
            before_seq=before_seq,
            limit=limit,
            with_deliveries=with_deliveries,
        )

    async def recent(self, session_id: int, limit: int = 50) -> list[MessageRecord]:
        """The newest ``limit`` messages, oldest first."""
        return await self.sessions.messages(session_id, before_seq=2**63 - 1, limit=limit)

    async def delta(self, session_id: int, after_seq: int, limit: int = 100) -> list[MessageRecord]:
        """Up to ``limit`` messages after ``after_seq``, oldest first."""
        return await self.sessions.messages(session_id, after_seq=after_seq, limit=limit)

    async def get_session(self, session_id: int) -> SessionRecord:
        return await self.sessions.get_session(session_id)

    async def find_session(self, key: SessionKey) -> SessionRecord | None:
        return await self.sessions.find_session(key)

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
        return await self.sessions.list_sessions(
            platform=platform,
            chat_id=chat_id,
            thread_id=thread_id,
            status=status,
            title_contains=title_contains,
            after=after,
            limit=limit,
        )

    async def list_chats(self, platform: str, limit: int = 200) -> list[str]:
        return await self.sessions.list_chats(platform, limit)

    async def close_session(self, session_id: int) -> bool:
        return await self.sessions.close_session(session_id)

    async def message_id_at(self, session_id: int, seq_no: int) -> int | None:
        return await self.sessions.message_id_at(session_id, seq_no)

    async def set_feedback(self, message_id: int, *, user_id: str, value: int) -> int | None:
        return await self.sessions.set_feedback(message_id, user_id=user_id, value=value)

    async def find_bot_message(
        self, platform: str, *, chat_id: str, platform_message_id: str
    ) -> int | None:
        return await self.sessions.find_bot_message(
            platform, chat_id=chat_id, platform_message_id=platform_message_id
        )

    async def feedback_by_seq(self, session_id: int) -> dict[int, int]:
        return await self.sessions.feedback_by_seq(session_id)

    # --- turns (``repos.turns``) ------------------------------------------------------------

    async def claim_turn(
        self,
        *,
        lease_seconds: float,
        platforms: Sequence[str] | None = None,
        with_pending: int = 0,
        context_page: int = 0,
    ) -> TurnClaim | None:
        return await self.turns.claim_turn(
            lease_seconds=lease_seconds,
            platforms=platforms,
            with_pending=with_pending,
            context_page=context_page,
        )

    async def renew_turn(self, claim: TurnClaim, *, lease_seconds: float) -> None:
        await self.turns.renew_turn(claim, lease_seconds=lease_seconds)

    async def release_turn(self, claim: TurnClaim) -> None:
        await self.turns.release_turn(claim)

    async def turn_requested_seq(self, session_id: int) -> int:
        return await self.turns.turn_requested_seq(session_id)

    async def turn_state(
        self,
        session_id: int,
        *,
        question_seq: int,
        upto_seq: int,
        user_platform: str,
        user_id: str | None,
    ) -> TurnState:
        return await self.turns.turn_state(
            session_id,
            question_seq=question_seq,
            upto_seq=upto_seq,
            user_platform=user_platform,
            user_id=user_id,
        )

    async def context_page(
        self,
        session_id: int,
        *,
        after_seq: int,
        upto_seq: int,
        limit: int,
        newest_first: bool = True,
    ) -> list[ContextRecord]:
        return await self.turns.context_page(
            session_id,
            after_seq=after_seq,
            upto_seq=upto_seq,
            limit=limit,
            newest_first=newest_first,
        )

    async def set_model_choice(
        self, session_id: int, *, platform: str, user_id: str | None, model: str
    ) -> None:
        await self.turns.set_model_choice(
            session_id, platform=platform, user_id=user_id, model=model
        )

    # --- summaries (``repos.summaries``) ----------------------------------------------------

    async def latest_summary(self, session_id: int) -> SummaryRecord | None:
        return await self.summary_repo.latest_summary(session_id)

    async def summaries(self, session_id: int) -> list[SummaryRecord]:
        return await self.summary_repo.summaries(session_id)

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
        return await self.summary_repo.add_summary(
            session_id,
            from_seq=from_seq,
            to_seq=to_seq,
            content=content,
            model=model,
            model_written=model_written,
        )

    # --- the end of a turn writes the outbox: it moves with the outbox ---------------------

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
        charges: Sequence[UsageCharge] = (),
        place: str | None = None,
    ) -> FinishedTurn:
        """``finish_turn`` in one statement (``queries.FINISH_TURN_OUTBOX``). With
        ``hand_over`` the first delivery part comes back claimed for this process when it is
        next in its session's order; the caller must send it (or hand it back). A streamed
        turn (``previews_after``) binds its previews in the same transaction, and the turn's
        model calls (``charges``) go to the usage ledger in the same statement."""
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
                *charge_columns(list(charges)),
                place or place_of(claim.key),
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


def _token(delivery: DeliveryRecord) -> uuid.UUID:
    if delivery.claim_token is None:
        raise LeaseLost(f"delivery {delivery.id} was not claimed")
    return uuid.UUID(delivery.claim_token)
