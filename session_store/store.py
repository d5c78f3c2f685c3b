"""The session store: a thin facade over one repository per area (``session_store.repos``).
Callers never see
SQL or driver records, and never a driver error: ``Database`` translates them at its one
boundary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import structlog

from session_store.db import Database
from session_store.records import (
    ContextRecord,
    DeliveryRecord,
    FinishedTurn,
    InboundItem,
    IngestResult,
    MessageRecord,
    OutgoingReply,
    SessionRecord,
    TurnClaim,
    TurnState,
)
from session_store.repos.inbox import Inbox
from session_store.repos.outbox import Outbox
from session_store.repos.people import People
from session_store.repos.sessions import Sessions
from session_store.repos.summaries import Summaries
from session_store.repos.turns import Turns
from session_store.repos.usage import Usage, UsageCharge
from session_store.values import ReplyTarget, SessionKey, SessionStatus

log = structlog.get_logger(__name__)


class Store:
    """Sessions, messages, turns, deliveries and cursors: the gateway's hot path. Each area
    is a repository (``inbox``, ``sessions``, ``turns``, ``summaries``, ``outbox``); the
    methods below keep their names for the callers."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.inbox = Inbox(db)
        self.sessions = Sessions(db)
        self.turns = Turns(db)
        self.summaries = Summaries(db)
        self.outbox = Outbox(db)
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
        self.outbox.process_id = value

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
        return await self.sessions.recent(session_id, limit)

    async def delta(self, session_id: int, after_seq: int, limit: int = 100) -> list[MessageRecord]:
        return await self.sessions.delta(session_id, after_seq, limit)

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

    # --- the outbox and its pacing (``repos.outbox``) ---------------------------------------

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
        done = await self.outbox.finish_turn_outbox(
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
        traceparent: str | None = None,
    ) -> FinishedTurn:
        return await self.outbox.finish_turn_outbox(
            claim,
            handled_seq=handled_seq,
            replies=replies,
            target=target,
            close_session=close_session,
            hand_over=hand_over,
            lease_seconds=lease_seconds,
            previews_after=previews_after,
            charges=charges,
            place=place,
            traceparent=traceparent,
        )

    async def claim_deliveries(
        self, *, platforms: Sequence[str], lease_seconds: float, limit: int = 1
    ) -> list[DeliveryRecord]:
        return await self.outbox.claim_deliveries(
            platforms=platforms, lease_seconds=lease_seconds, limit=limit
        )

    async def renew_delivery(self, delivery: DeliveryRecord, *, lease_seconds: float) -> None:
        await self.outbox.renew_delivery(delivery, lease_seconds=lease_seconds)

    async def mark_pacing(
        self, delivery: DeliveryRecord, *, wait: float, lease_seconds: float = 0.0
    ) -> None:
        await self.outbox.mark_pacing(delivery, wait=wait, lease_seconds=lease_seconds)

    async def mark_on_wire(self, delivery: DeliveryRecord) -> None:
        await self.outbox.mark_on_wire(delivery)

    async def mark_sent(self, delivery: DeliveryRecord, platform_message_id: str | None) -> bool:
        return await self.outbox.mark_sent(delivery, platform_message_id)

    async def mark_retry(self, delivery: DeliveryRecord, *, delay: float, error: str) -> None:
        await self.outbox.mark_retry(delivery, delay=delay, error=error)

    async def mark_failed(
        self, delivery: DeliveryRecord, error: str, *, ambiguous: bool = False
    ) -> None:
        await self.outbox.mark_failed(delivery, error, ambiguous=ambiguous)

    async def recover_expired_sends(
        self,
        *,
        idempotent_platforms: Sequence[str],
        other_platforms: Sequence[str],
        windowed_platforms: Mapping[str, float] | None = None,
    ) -> tuple[int, int]:
        return await self.outbox.recover_expired_sends(
            idempotent_platforms=idempotent_platforms,
            other_platforms=other_platforms,
            windowed_platforms=windowed_platforms,
        )

    async def retry_failed_delivery(self, delivery_id: int) -> bool:
        return await self.outbox.retry_failed_delivery(delivery_id)

    async def deliveries_for_session(self, session_id: int) -> list[DeliveryRecord]:
        return await self.outbox.deliveries_for_session(session_id)

    async def delivery_counts(self) -> dict[str, int]:
        return await self.outbox.delivery_counts()

    async def oldest_pending_delivery_age(self) -> float | None:
        return await self.outbox.oldest_pending_delivery_age()
