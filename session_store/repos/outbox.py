"""The outbox: the end of a turn writes its replies and their delivery rows; the delivery
workers claim them in each session's order under a lease fenced by a claim token, mark them
as paced, on the wire, sent, retried or failed; recovery finds sends whose worker died."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from session_store.db import Database
from session_store.errors import LeaseLost
from session_store.estimates import capped_count
from session_store.records import DeliveryRecord, FinishedTurn, OutgoingReply, TurnClaim
from session_store.repos.liveness import dead_process
from session_store.repos.previews import SQL as PREVIEWS_SQL
from session_store.repos.usage import UsageCharge, charge_columns, place_of
from session_store.rows import reader
from session_store.sql import load
from session_store.values import ReplyTarget, StoredPart, as_stored

SQL = load(__package__, "outbox.sql", dead_claim_process=dead_process("claim_process"))

#: one ``DeliveryRecord`` from a row holding ``delivery_columns`` (the operator surface and
#: the transcript read them too)
delivery_from_row = reader(DeliveryRecord)

_REQUEUED_PACING = "requeued: the worker stopped while it waited for pacing (not sent)"
_REQUEUED = "requeued: worker stopped during send"
_AMBIGUOUS = (
    "ambiguous: the worker stopped during the send; the platform may or may not show it "
    "(retry from the admin API if it does not)"
)


class Outbox:
    def __init__(self, db: Database) -> None:
        self.db = db
        #: recorded on the deliveries this process claims (``Store.process_id``)
        self.process_id: int | None = None

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
        """The end of a turn in one statement (``outbox.sql``, ``finish_turn_outbox``). With
        ``hand_over`` the first delivery part comes back claimed for this process when it is
        next in its session's order; the caller must send it (or hand it back). A streamed
        turn (``previews_after``) binds its previews in the same transaction, and the turn's
        model calls (``charges``) go to the usage ledger in the same statement. ``traceparent``:
        the trace the deliveries' sends join (tracing on)."""
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
        args = (
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
            traceparent,
        )
        # one statement; a streamed turn also binds its previews, in the same transaction
        opened = self.db.connection() if previews_after is None else self.db.transaction()
        async with opened as conn:
            rows = await conn.fetch(SQL.finish_turn_outbox, *args)
            if not rows:
                raise LeaseLost(f"turn lease of session {claim.session_id} was taken over")
            last = rows[0]["last_seq_no"]
            seqs = list(range(last - len(replies) + 1, last + 1))
            if previews_after is not None:
                shown = [(s, out) for s, out in zip(seqs, replies, strict=True) if out.parts]
                if shown:
                    seq, out = shown[-1]
                    await conn.execute(
                        PREVIEWS_SQL.bind, claim.session_id, previews_after, seq, len(out.parts)
                    )
        handed = tuple(delivery_from_row(r) for r in rows if r["id"] is not None)
        return FinishedTurn(
            seqs=seqs, deliveries=rows[0]["written"], handed=handed, more=rows[0]["more"]
        )

    async def claim_deliveries(
        self, *, platforms: Sequence[str], lease_seconds: float, limit: int = 1
    ) -> list[DeliveryRecord]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(
                SQL.claim_deliveries, lease_seconds, list(platforms), limit, self.process_id
            )
        return [delivery_from_row(r) for r in rows]

    # The writes below are fenced by the claim: they raise ``LeaseLost`` (and change nothing)
    # when the delivery is no longer held by ``delivery``'s claim.

    async def _fenced(self, query: str, delivery: DeliveryRecord, *args: Any) -> None:
        async with self.db.connection() as conn:
            row_id = await conn.fetchval(query, delivery.id, _token(delivery), *args)
        if row_id is None:
            raise LeaseLost(f"delivery {delivery.id} is no longer held by this claim")

    async def renew_delivery(self, delivery: DeliveryRecord, *, lease_seconds: float) -> None:
        await self._fenced(SQL.renew_delivery, delivery, lease_seconds)

    async def mark_pacing(
        self, delivery: DeliveryRecord, *, wait: float, lease_seconds: float = 0.0
    ) -> None:
        """The claim waits ``wait`` seconds (for its chat's pacer or a free worker), nothing
        of it on the wire: recovery may resend it anywhere should its process die now
        (migration 0014). Its lease is kept at least ``lease_seconds`` past the wait."""
        await self._fenced(SQL.mark_pacing, delivery, wait, lease_seconds)

    async def mark_on_wire(self, delivery: DeliveryRecord) -> None:
        """The wait is over and the request goes out next: from here the send may reach the
        platform, so recovery treats it as in flight again."""
        await self._fenced(SQL.mark_on_wire, delivery)

    async def mark_sent(self, delivery: DeliveryRecord, platform_message_id: str | None) -> bool:
        """Fenced like the others; True when parts of the session wait behind this one."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.mark_sent, delivery.id, _token(delivery), platform_message_id
            )
        if row is None:
            raise LeaseLost(f"delivery {delivery.id} is no longer held by this claim")
        return bool(row["more"])

    async def mark_retry(self, delivery: DeliveryRecord, *, delay: float, error: str) -> None:
        await self._fenced(SQL.mark_retry, delivery, delay, error)

    async def mark_failed(
        self, delivery: DeliveryRecord, error: str, *, ambiguous: bool = False
    ) -> None:
        await self._fenced(SQL.mark_failed, delivery, error, ambiguous)

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
            rows = await conn.fetch(SQL.expired_sending, platforms)
            for row in rows:
                window = windows.get(row["platform"])
                age = row["claim_age"]
                within = window is not None and age is not None and age < window
                # one waiting for pacing sent nothing: resent on any platform
                if row["pacing"] or row["platform"] in idempotent_platforms or within:
                    reason = _REQUEUED_PACING if row["pacing"] else _REQUEUED
                    await conn.execute(SQL.requeue_delivery, row["id"], reason)
                    requeued += 1
                else:
                    await conn.execute(SQL.mark_ambiguous, row["id"], _AMBIGUOUS)
                    failed += 1
        return requeued, failed

    async def retry_failed_delivery(self, delivery_id: int) -> bool:
        async with self.db.connection() as conn:
            return await conn.fetchval(SQL.retry_failed_delivery, delivery_id) is not None

    async def deliveries_for_session(self, session_id: int) -> list[DeliveryRecord]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.deliveries_for_session, session_id)
        return [delivery_from_row(r) for r in rows]

    async def delivery_counts(self) -> dict[str, int]:
        """Deliveries by status (those with any): pending, sending and failed exactly, sent
        exactly up to ``estimates.EXACT_UP_TO`` and estimated past it."""
        async with self.db.connection() as conn:
            counts, _ = await delivery_status_counts(conn)
        return {status: n for status, n in counts.items() if n}

    async def oldest_pending_delivery_age(self) -> float | None:
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.oldest_pending_age)
        return None if value is None else float(value)


async def delivery_status_counts(conn: asyncpg.Connection) -> tuple[dict[str, int], bool]:
    """(deliveries by status, whether the sent count is an estimate): flat in the size of
    the outbox (``session_store.estimates``)."""
    small = await conn.fetchrow(SQL.open_delivery_counts)
    assert small is not None
    sent, approximate = await capped_count(conn, SQL.sent_delivery_count, SQL.sent_deliveries)
    return dict(small) | {"sent": sent}, approximate


def _token(delivery: DeliveryRecord) -> uuid.UUID:
    if delivery.claim_token is None:
        raise LeaseLost(f"delivery {delivery.id} was not claimed")
    return uuid.UUID(delivery.claim_token)
