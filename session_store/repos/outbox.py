"""The outbox: the end of a turn writes its replies and their delivery rows; the delivery
workers claim them in each session's order under a lease fenced by a claim token, mark them
as paced, on the wire, sent, retried or failed; recovery finds sends whose worker died."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from session_store.db import Database
from session_store.errors import LeaseLost, StoreError
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
_RELEASED = "requeued: the write that claimed it lost its answer (not sent)"
_AMBIGUOUS = (
    "ambiguous: the worker stopped during the send; the platform may or may not show it "
    "(retry from the admin API if it does not)"
)


#: fenced writes per statement at most (a batch beyond waits for the next one)
BATCH_LIMIT = 256


@dataclass(slots=True)
class _Write:
    op: str
    id: int
    token: uuid.UUID
    pmid: str | None
    wait: float
    lease: float
    done: asyncio.Future[bool]


class FencedWrites:
    """The fenced single-row writes of claimed parts (receipt, pacing mark, its clearing,
    lease renewal), group-committed: a write made while another batch is on its way to the
    database joins the next one, and each batch is one statement (``fenced_writes``). Idle,
    a write goes out at once, alone; under load eight workers' receipts and marks cost one
    transaction, not eight. Each caller still learns its own row's outcome (``LeaseLost``
    when its claim was taken over), after the commit."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._queue: list[_Write] = []
        self._flusher: asyncio.Task[None] | None = None

    async def write(
        self,
        op: str,
        delivery: DeliveryRecord,
        *,
        pmid: str | None = None,
        wait: float = 0.0,
        lease: float = 0.0,
    ) -> bool:
        """One fenced write (``op`` as in ``fenced_writes``); True for a receipt whose
        session has parts waiting behind it."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append(_Write(op, delivery.id, _token(delivery), pmid, wait, lease, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="delivery-fenced-writes")
        return await done

    async def _flush(self) -> None:
        batch: list[_Write] = []
        try:
            while self._queue:
                batch = []
                seen: set[int] = set()
                later: list[_Write] = []
                for w in self._queue:
                    # one write per row and statement: a second one (a renewal beside a
                    # receipt) goes in the next batch, after the first is committed
                    if w.id in seen or len(batch) >= BATCH_LIMIT:
                        later.append(w)
                    else:
                        seen.add(w.id)
                        batch.append(w)
                self._queue = later
                await self._run(batch)
        except BaseException:
            # cancelled (the loop is closing): the writes not made are cancelled for their
            # callers, none left waiting for a flush that will not come
            for w in [*batch, *self._queue]:
                w.done.cancel()
            self._queue = []
            raise

    async def _run(self, batch: list[_Write]) -> None:
        try:
            async with self._db.connection() as conn:
                rows = await conn.fetch(
                    SQL.fenced_writes,
                    [w.op for w in batch],
                    [w.id for w in batch],
                    [w.token for w in batch],
                    [w.pmid for w in batch],
                    [w.wait for w in batch],
                    [w.lease for w in batch],
                )
        except StoreError as exc:
            if len(batch) > 1 and not exc.transient:
                # one row's bad value must not fail the others' writes: each alone
                for w in batch:
                    await self._run([w])
                return
            for w in batch:
                if not w.done.done():
                    w.done.set_exception(exc)
            return
        except Exception as exc:  # noqa: BLE001 - a bug: each caller gets it, the next go on
            for w in batch:
                if not w.done.done():
                    w.done.set_exception(exc)
            return
        written = {r["id"]: bool(r["more"]) for r in rows}
        for w in batch:
            if w.done.done():
                continue
            if w.id in written:
                w.done.set_result(written[w.id])
            else:
                w.done.set_exception(LeaseLost(f"delivery {w.id} is no longer held by this claim"))


class Outbox:
    def __init__(self, db: Database) -> None:
        self.db = db
        #: recorded on the deliveries this process claims (``Store.process_id``)
        self.process_id: int | None = None
        self._writes = FencedWrites(db)

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
        hand_token: uuid.UUID | None = None,
    ) -> FinishedTurn:
        """The end of a turn in one statement (``outbox.sql``, ``finish_turn_outbox``). With
        ``hand_over`` the first delivery part comes back claimed for this process when it is
        next in its session's order; the caller must send it (or hand it back). A streamed
        turn (``previews_after``) binds its previews in the same transaction, and the turn's
        model calls (``charges``) go to the usage ledger in the same statement. ``traceparent``:
        the trace the deliveries' sends join (tracing on). ``hand_token``: the handed part's
        claim token, the caller's own, so that if the answer to this statement is lost after
        it committed the caller can hand the part back (``release_claims``)."""
        if replies and target is None:
            raise ValueError("replies need a target")
        ords, parts, stored = _flat_parts(replies)
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
            hand_token or uuid.uuid4(),
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
        self,
        *,
        platforms: Sequence[str],
        lease_seconds: float,
        limit: int = 1,
        token: uuid.UUID | None = None,
    ) -> list[DeliveryRecord]:
        """Claim due parts under ``token`` (the caller's own, so that a claim whose answer was
        lost after it committed can be handed back: ``release_claims``), oldest due first."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(
                SQL.claim_deliveries,
                lease_seconds,
                list(platforms),
                limit,
                self.process_id,
                token or uuid.uuid4(),
            )
        # in the order they were due (an UPDATE's RETURNING has no order of its own)
        return sorted(map(delivery_from_row, rows), key=lambda d: (d.next_attempt_at, d.id))

    async def release_claims(self, tokens: Sequence[uuid.UUID]) -> int:
        """Hand back what writes under ``tokens`` claimed, when their caller never learned
        it (the database committed, then the answer was lost): pending again at once, the
        attempt not counted. Nothing of such a claim was sent, whatever the platform.
        Returns how many parts were handed back (0 when the writes never landed)."""
        if not tokens:
            return 0
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.release_claims, list(tokens), _RELEASED)
        return len(rows)

    # The writes below are fenced by the claim: they raise ``LeaseLost`` (and change nothing)
    # when the delivery is no longer held by ``delivery``'s claim.

    async def _fenced(self, query: str, delivery: DeliveryRecord, *args: Any) -> None:
        async with self.db.connection() as conn:
            row_id = await conn.fetchval(query, delivery.id, _token(delivery), *args)
        if row_id is None:
            raise LeaseLost(f"delivery {delivery.id} is no longer held by this claim")

    async def renew_delivery(self, delivery: DeliveryRecord, *, lease_seconds: float) -> None:
        await self._writes.write("r", delivery, lease=lease_seconds)

    async def mark_pacing(
        self, delivery: DeliveryRecord, *, wait: float, lease_seconds: float = 0.0
    ) -> None:
        """The claim waits ``wait`` seconds (for its chat's pacer or a free worker), nothing
        of it on the wire: recovery may resend it anywhere should its process die now
        (migration 0014). Its lease is kept at least ``lease_seconds`` past the wait."""
        await self._writes.write("p", delivery, wait=wait, lease=lease_seconds)

    async def mark_on_wire(self, delivery: DeliveryRecord) -> None:
        """The wait is over and the request goes out next: from here the send may reach the
        platform, so recovery treats it as in flight again."""
        await self._writes.write("w", delivery)

    async def mark_sent(self, delivery: DeliveryRecord, platform_message_id: str | None) -> bool:
        """Fenced like the others; True when parts of the session wait behind this one.
        Group-committed with the other workers' receipts and marks (``FencedWrites``)."""
        return await self._writes.write("s", delivery, pmid=platform_message_id)

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

    async def delivery(self, delivery_id: int) -> DeliveryRecord | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.get_delivery, delivery_id)
        return None if row is None else delivery_from_row(row)

    async def answer_parts(
        self, session_id: int, *, after_seq: int, before_seq: int
    ) -> list[DeliveryRecord]:
        """The text parts of the newest answer between two seqs, in order: what an answer
        written again for an edited question edits in place."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.answer_parts, session_id, after_seq, before_seq)
        return [delivery_from_row(r) for r in rows]

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


def _flat_parts(
    replies: Sequence[OutgoingReply],
) -> tuple[list[int], list[int], list[StoredPart]]:
    """The replies' delivery parts as the statement's columns: each part's reply (its
    1-based place among ``replies``), its number within that reply, and the part itself."""
    ords: list[int] = []
    parts: list[int] = []
    stored: list[StoredPart] = []
    for n, out in enumerate(replies, start=1):
        for part_no, part in enumerate(out.parts, start=1):
            ords.append(n)
            parts.append(part_no)
            stored.append(as_stored(part))
    return ords, parts, stored
