"""The delivery worker: claims due outbox rows, paces per chat, sends through the platform's
transport, and records the receipt or the failure on the row.

Policy lives here once for every platform: ordering (a part is claimable only after the parts
before it in its session), pacing, retries with backoff that honor a platform's retry-after,
a bounded number of attempts, and visible permanent failures. Transports only do the raw send.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.core import tracing
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError, LeaseLost, StoreError
from gateway.core.hub import PollGate, Signal
from gateway.core.lifecycle.guards import Guard, race, renewal_interval, stop_guards
from gateway.core.lifecycle.supervisor import Beat, item_backoff, no_beat, pause, persist
from gateway.core.metrics import Metrics
from gateway.core.parts import (
    ApprovalCardPart,
    DeletePart,
    EditPart,
    FilePart,
    OutboxPart,
    TextPart,
    part_of,
)
from gateway.core.ports import SendResult, Transport, send_card
from gateway.outbox.failures import Failures, resend_safe_after
from gateway.outbox.pacing import NO_LIMIT, Budget, Pacing, Rules, pace_rules
from gateway.outbox.retouch import retouch
from gateway.outbox.stream_finish import finish_part
from gateway.outbox.waiting import Held, WaitingRoom
from session_store.records import DeliveryRecord
from session_store.repos.previews import PreviewStore
from session_store.store import Store

log = structlog.get_logger(__name__)

#: handed-over deliveries waiting per worker before finished turns leave them in the table
HANDOFF_LIMIT = 4
#: seconds kept from a platform's idempotency window when a send found in flight is resent:
#: the requeue, the next claim and the send itself happen within it
RESEND_MARGIN = 10.0
#: seconds a failed claim's token is handed back again on every recovery round: a statement
#: whose connection dropped may still commit a moment after the error reached us
LOST_CLAIM_SECONDS = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliverySettings:
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    max_attempts: int = 8
    workers: int = 8
    max_backoff: float = 300.0


class DeliveryWorker:
    def __init__(
        self,
        store: Store,
        transports: Mapping[str, Transport],
        *,
        metrics: Metrics,
        wake: Signal,
        settings: DeliverySettings,
        previews: PreviewStore | None = None,
        budget: Budget | None = None,
    ) -> None:
        self._store = store
        #: streaming: parts of a streamed answer edit their preview in place
        self._previews = previews
        self._transports = transports
        self._metrics = metrics
        self._wake = wake
        self._settings = settings
        #: the chats' pacing budget, shared with previews and typing (``gateway.outbox.pacing``):
        #: in memory while this process is alone, PostgreSQL's while replicas live
        self._budget: Budget = budget if budget is not None else Pacing()
        self._failures = Failures(
            store, metrics, self._budget, settings.max_attempts, settings.max_backoff
        )
        self._platforms = sorted(transports)
        #: claimed parts waiting off the workers: handed over by a finished turn (in order),
        #: or parked until their chat's pacing slot
        self._handed = WaitingRoom(self._mark_waiting, self._wake.set)
        self._stopping = False
        #: the handoff was full, so finished turns leave their parts in the table: no part
        #: is handed over until a claim finds that backlog drained (``accepting``)
        self._overflow = False
        self._polls = PollGate()
        #: wake-ups of handed-over deliveries that a sibling sent without waiting
        self._spent_wakes = 0
        #: (token, monotonic time) of claims that failed: the database may have committed one
        #: whose answer was lost, leaving a part claimed under a token nobody holds; recovery
        #: hands such parts back (``release_claims``)
        self._lost_claims: list[tuple[uuid.UUID, float]] = []

    async def run(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._recovery(stopping), name="delivery-recovery")
            for n in range(self._settings.workers):
                group.create_task(self._worker(stopping), name=f"delivery-worker-{n}")

    async def recover(self) -> None:
        await self._release_lost_claims()
        # a send found expired has been in flight for at least the delivery lease
        lease = self._settings.lease_seconds
        idempotent = [p for p, t in self._transports.items() if resend_safe_after(t, lease)]
        # found through its dead process, a send may be seconds old; where the key
        # is remembered for a window, one claimed well within it is resent under that key
        # (the margin covers the requeue and the next claim)
        windowed = {
            p: t.resend_window - RESEND_MARGIN
            for p, t in self._transports.items()
            if p not in idempotent and t.idempotent and t.resend_window is not None
        }
        other = [p for p in self._transports if p not in idempotent and p not in windowed]
        requeued, failed = await self._store.outbox.recover_expired_sends(
            idempotent_platforms=idempotent, other_platforms=other, windowed_platforms=windowed
        )
        if requeued or failed:
            log.warning("expired_sends_recovered", requeued=requeued, failed_ambiguous=failed)
            self._wake.set()

    async def _release_lost_claims(self) -> None:
        """Hand back the parts that failed claims may have claimed after all (committed, the
        answer lost): nothing of them was sent. Each token is tried for a while, since a
        dropped connection's statement can still commit after its error reached us."""
        if not self._lost_claims:
            return
        tried = list(self._lost_claims)
        released = await self._store.outbox.release_claims([token for token, _ in tried])
        cutoff = time.monotonic() - LOST_CLAIM_SECONDS
        done = {token for token, at in tried if at < cutoff}
        self._lost_claims = [(token, at) for token, at in self._lost_claims if token not in done]
        if released:
            log.warning("lost_claims_released", released=released)
            self._wake.set()

    @property
    def idle_workers(self) -> int:
        """Workers waiting for work right now."""
        return self._handed.idle

    @property
    def lease_seconds(self) -> float:
        return self._settings.lease_seconds

    @property
    def recovery_interval(self) -> float:
        """Sends of a dead process are found by their process's liveness, so recovery looks
        often (a cheap indexed query) rather than once per lease."""
        return min(max(self._settings.poll_seconds, 0.5), self._settings.lease_seconds / 4)

    async def _recovery(self, stopping: asyncio.Event, beat: Beat = no_beat) -> None:
        while not stopping.is_set():
            beat()
            try:
                await self.recover()
            except StoreError as exc:
                log.warning("delivery_recovery_failed", error=str(exc))
            await pause(self.recovery_interval, stopping)

    async def recovery_loop(self, stopping: asyncio.Event, beat: Beat = no_beat) -> None:
        await self._recovery(stopping, beat)

    async def _worker(self, stopping: asyncio.Event) -> None:
        await self.work(stopping)

    # --- the handoff from finished turns ----------------------------------------

    def accepting(self) -> bool:
        """Take another claimed delivery? Bounded, so a handed delivery is sent well within
        its lease (a backlog stays in the table, for any replica to claim). Once full, no
        part is taken until the workers have drained that backlog (``_overflow``): workers
        send handed parts before they claim, so a part handed over later would overtake
        the ones left in the table, over and over while the load lasts (under overload the
        slowest 1% of replies waited seconds in the table)."""
        if self._stopping:
            return False
        if len(self._handed) >= HANDOFF_LIMIT * self._settings.workers:
            self._overflow = True
        return not self._overflow

    def hand_over(self, delivery: DeliveryRecord) -> None:
        self._handed.add(delivery)

    async def hand_back(self) -> None:
        """Shutdown: handed or parked deliveries nobody started are put back as pending
        (fenced), a parked one due when its slot comes, for the next start or another replica;
        never left to look like a send cut short."""
        self._stopping = True
        for held in self._handed.drain():
            delivery = held.delivery
            delay = self._handed.remaining(held)
            try:
                if held.mark is not None:
                    await held.mark
                await self._store.outbox.mark_retry(
                    delivery, delay=delay, error="handed back at shutdown"
                )
            except (StoreError, LeaseLost) as exc:
                log.warning("delivery_hand_back_failed", delivery_id=delivery.id, error=str(exc))

    async def _mark_waiting(self, delivery: DeliveryRecord, wait: float) -> None:
        """Say on the row that this claim waits off the wire (``gateway.outbox.waiting``);
        a failed write is logged: the part is cleared before it goes out either way."""
        try:
            await self._store.outbox.mark_pacing(
                delivery, wait=wait, lease_seconds=self._settings.lease_seconds
            )
        except StoreError as exc:
            log.warning("delivery_pacing_mark_failed", delivery_id=delivery.id, error=str(exc))

    async def work(self, stopping: asyncio.Event, beat: Beat = no_beat) -> None:
        """One delivery worker. Any failure of one delivery (a store error while recording
        it, a bug) is logged with the delivery and retried after a jittered backoff; the
        worker goes on.

        Wake-ups are precise: a delivery handed over by a finished turn is sent
        without a claim; each delivery row written for the table lets one worker claim; a
        worker that found work looks again at once; one that found nothing waits for a
        wake-up or ``poll_seconds`` (retries coming due, other replicas' rows)."""
        failures = 0
        look = True  # at start: rows may be due from before
        # stopping: deliveries already handed over are still sent (within the drain bound)
        while not stopping.is_set() or self._handed:
            beat()
            woken = False
            if not look and not self._handed:
                self._handed.idle += 1
                try:
                    woken = await self._wake.wait(self._settings.poll_seconds)
                finally:
                    self._handed.idle -= 1
                if stopping.is_set():
                    break
                if (
                    not woken
                    and not self._handed
                    and not self._polls.due(self._settings.poll_seconds)
                ):
                    continue  # a sibling polled just now: one poll per process
            if self._handed:
                # sent without a claim; the wake-up its handover left is used up with it
                # (or, when it already went to a waiting sibling, that sibling skips it)
                if not woken and not self._wake.take():
                    self._spent_wakes += 1
                look = False
                claimed = [self._handed.take()]
            elif woken and self._spent_wakes > 0:
                # our wake-up was for a handed-over delivery a busy sibling took meanwhile
                self._spent_wakes -= 1
                continue
            else:
                token = uuid.uuid4()
                # a backlog left in the table by a full handoff is claimed a few parts at a
                # time (in their order), and once a claim finds fewer, handoffs resume
                limit = HANDOFF_LIMIT if self._overflow else 1
                try:
                    claimed = [
                        Held(d)
                        for d in await self._store.outbox.claim_deliveries(
                            platforms=self._platforms,
                            lease_seconds=self._settings.lease_seconds,
                            limit=limit,
                            token=token,
                        )
                    ]
                except StoreError as exc:
                    # it may have committed with its answer lost: recovery hands it back
                    self._lost_claims.append((token, time.monotonic()))
                    failures += 1
                    log.warning("delivery_claim_failed", error=str(exc), failures=failures)
                    await pause(item_backoff(failures), stopping)
                    look = True
                    continue
                if len(claimed) < limit:
                    self._overflow = False
                if woken:
                    # each wake-up stands for one row: those of the others claimed here are
                    # used up, or siblings would wake for claims that find nothing
                    for _ in claimed[1:]:
                        self._wake.take()
                # a wake-up stands for one row written; a claim made on the poll (retries
                # come due, other replicas' rows, the start), or a full claim of a backlog,
                # keeps looking while it finds some
                backlog_left = limit > 1 and len(claimed) == limit
                look = bool(claimed) and (not woken or backlog_left)
            for held in claimed:
                more, failures = await self._start_one(held, stopping, beat, failures)
                look = look or more  # parts of its session wait behind it

    async def _start_one(
        self, held: Held, stopping: asyncio.Event, beat: Beat, failures: int
    ) -> tuple[bool, int]:
        """``_start`` for a worker, surviving its failure: (more parts of its session wait
        behind it, the worker's failures in a row after it)."""
        delivery = held.delivery
        try:
            more = await self._start(held, beat)
            return more, 0
        except LeaseLost as exc:
            # taken over (recovered after our lease, or our process looked dead):
            # the new holder decides; we write nothing
            log.warning("delivery_claim_lost", delivery_id=delivery.id, error=str(exc))
            return False, failures
        except Exception:
            failures += 1
            log.exception(
                "delivery_crashed",
                delivery_id=delivery.id,
                platform=delivery.platform,
                session_id=delivery.session_id,
                seq_no=delivery.seq_no,
                part_no=delivery.part_no,
            )
            await pause(item_backoff(failures), stopping)
            return False, failures

    async def _start(self, held: Held, beat: Beat) -> bool:
        """Send a claimed part now if its chat is ready, else park it until the slot it
        reserves and return at once: waiting never occupies a worker. True when it was
        sent and more parts of its session wait behind it."""
        delivery = held.delivery
        if not held.reserved:
            rules = pace_rules(self._transports[delivery.platform], delivery.target)
            room = self._handed.can_park()
            wait = await self._budget.reserve(rules, NO_LIMIT if room else 0.0)
            if wait > 0 and room:
                self._handed.park(held, wait)
                return False
            if wait > 0:
                # too many parked: back to the table, claimable when the chat is ready
                if held.mark is not None:
                    await held.mark
                await persist(
                    lambda: self._store.outbox.mark_retry(delivery, delay=wait, error="paced"),
                    what="mark_retry",
                    delivery_id=delivery.id,
                )
                return False
            held.reserved = True
        return await self.deliver(delivery, beat=beat, held=held)

    @property
    def _renewal_seconds(self) -> float:
        """How often a claimed part's lease is renewed while it waits or is sent."""
        return renewal_interval(self._settings.lease_seconds)

    async def _keep_lease(
        self, delivery: DeliveryRecord, beat: Beat, *, first: float | None = None
    ) -> None:
        """Renew the delivery's lease while it waits for pacing or is being sent, so that
        recovery never takes a send that a live worker is still making. ``first``: the wait
        before the first renewal (default: the interval)."""
        wait = self._renewal_seconds if first is None else first
        while True:
            await asyncio.sleep(wait)
            wait = self._renewal_seconds
            try:
                await self._store.outbox.renew_delivery(
                    delivery, lease_seconds=self._settings.lease_seconds
                )
            except LeaseLost:
                raise
            except StoreError as exc:
                log.warning(
                    "delivery_lease_renewal_failed", delivery_id=delivery.id, error=str(exc)
                )
                beat()  # retrying through an outage is not being wedged
                continue
            beat()

    async def deliver(
        self, delivery: DeliveryRecord, *, beat: Beat = no_beat, held: Held | None = None
    ) -> bool:
        """Send one claimed delivery and record how it went; True when it was sent and more
        parts of its session wait behind it. ``held``: its slot is reserved and has come
        (a worker's path); without it the pacing wait is spent here."""
        if not tracing.enabled():
            return await self._deliver(delivery, beat=beat, held=held)
        target = delivery.target
        # one span per attempt, in the trace of the message it answers (stored with the row)
        with tracing.span(
            "delivery.attempt",
            {
                "gateway.delivery_id": delivery.id,
                "gateway.seq_no": delivery.seq_no,
                "gateway.part_no": delivery.part_no,
                "gateway.attempt": delivery.attempts,
                "gateway.part_kind": delivery.kind,
            },
            parent=delivery.traceparent,
            ids=tracing.place_ids(
                target,
                session_id=delivery.session_id,
                # the message answered (the target replies to it where the platform can)
                message_id=target.reply_to_message_id,
            ),
        ):
            return await self._deliver(delivery, beat=beat, held=held)

    async def _deliver(self, delivery: DeliveryRecord, *, beat: Beat, held: Held | None) -> bool:
        transport = self._transports[delivery.platform]
        target = delivery.target
        bound = log.bind(
            platform=target.platform,
            chat_id=target.chat_id,
            thread_id=target.thread_id,
            session_id=delivery.session_id,
            seq_no=delivery.seq_no,
            part_no=delivery.part_no,
            delivery_id=delivery.id,
        )
        send = asyncio.ensure_future(self._paced_send(transport, delivery, held))
        # the lease renewal starts only if the send is still waiting or going when the first
        # renewal is due (``race``)
        renewal = Guard(
            self._renewal_seconds,
            lambda first: self._keep_lease(delivery, beat, first=first),
            "delivery-lease",
        )
        started: list[asyncio.Task[Any]] = []
        try:
            done, started = await race(send, (renewal,))
            renew = started[0] if started else None
            if renew is not None and renew in done and send not in done:
                # the claim was taken over while we waited or sent: the new holder decides
                send.cancel()
                await asyncio.gather(send, return_exceptions=True)
                renew.result()
                raise LeaseLost(f"delivery {delivery.id}: lease renewal stopped")
            try:
                result = send.result()
            except LeaseLost:
                raise  # taken over before it went out (the pacing marks are fenced)
            except DeliveryError as exc:
                await self._failures.record(delivery, transport, exc, bound)
                return False
            except Exception as exc:  # noqa: BLE001 - a transport bug must not kill the
                # worker. Whether the platform got it is unknown: for a transport without
                # idempotency that is ambiguous (never resent blindly), else retried
                bound.exception("delivery_transport_crashed")
                await self._failures.record(
                    delivery,
                    transport,
                    DeliveryError(f"{type(exc).__name__}: {exc}", ambiguous=True),
                    bound,
                )
                return False
        finally:
            await stop_guards(started)
        more = await persist(
            lambda: self._store.outbox.mark_sent(delivery, result.platform_message_id),
            what="mark_sent",
            delivery_id=delivery.id,
        )
        self._metrics.deliveries.labels(delivery.platform, "sent").inc()
        tracing.annotate(
            {"gateway.outcome": "sent", "gateway.platform_message_id": result.platform_message_id}
        )
        bound.info(
            "reply_delivered",
            platform_message_id=result.platform_message_id,
            attempts=delivery.attempts,
        )
        return more

    async def _paced_send(
        self, transport: Transport, delivery: DeliveryRecord, held: Held | None
    ) -> SendResult:
        budget = _OffWire(self, delivery)
        if held is None:
            await budget.reserve(pace_rules(transport, delivery.target))
        elif held.mark is not None:
            await held.mark  # its own write lands first: the clearing is never overtaken
            await self._on_wire(delivery)
        try:
            part = part_of(delivery)
        except (ValueError, KeyError, TypeError) as exc:
            raise DeliveryError(f"unreadable outbox part: {exc}", permanent=True) from exc
        if isinstance(part, EditPart | DeletePart):
            # an earlier answer written again or retracted (gateway.outbox.retouch)
            return await retouch(self._store.outbox, transport, delivery, part)
        if (
            self._previews is not None
            and isinstance(part, TextPart | FilePart)
            and part.finishes_stream
        ):
            # a streamed answer: edit the preview into the final text, never send it again
            try:
                edited = await finish_part(self._previews, transport, delivery, part, budget)
            except StoreError as exc:
                # nothing was sent: retried like any transient failure
                raise DeliveryError(f"previews unreadable: {exc}") from exc
            if edited is not None:
                return edited
        return await send_part(
            transport, delivery.target, part, idempotency_key=f"gw-{delivery.id}"
        )

    async def wait_off_wire(self, delivery: DeliveryRecord, wait: float) -> None:
        """Wait ``wait`` seconds for the chat's pacer with the row saying so: a
        SIGKILL now leaves a claim that recovery resends instead of failing it as ambiguous.
        Only a delivery that has to wait pays these two writes; the wait hides the first.
        The mark is cleared (fenced by the claim) before anything goes out: a claim taken over
        meanwhile raises ``LeaseLost`` here and sends nothing."""
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        try:
            await self._store.outbox.mark_pacing(delivery, wait=wait)
        except LeaseLost:
            raise
        except StoreError as exc:
            # written or not, it is cleared below before the send: a kill meanwhile is
            # ambiguous as before, never resent after going out
            log.warning("delivery_pacing_mark_failed", delivery_id=delivery.id, error=str(exc))
        await asyncio.sleep(max(0.0, until - loop.time()))
        await self._on_wire(delivery)

    async def _on_wire(self, delivery: DeliveryRecord) -> None:
        """Clear the off-wire mark (fenced): the request goes out next."""
        try:
            await persist(
                lambda: self._store.outbox.mark_on_wire(delivery),
                what="mark_on_wire",
                delivery_id=delivery.id,
            )
        except LeaseLost:
            raise
        except StoreError as exc:
            raise DeliveryError(f"not sent: the store is unreachable: {exc}") from exc


async def send_part(
    transport: Transport, target: ReplyTarget, part: OutboxPart, *, idempotency_key: str
) -> SendResult:
    """Send one outbox part by its kind: a message, an upload, or an approval card (the
    transport adds its buttons, which carry the request's id)."""
    match part:
        case TextPart():
            return await transport.send(target, part.text, idempotency_key=idempotency_key)
        case FilePart():
            return await transport.send_file(target, part.file, idempotency_key=idempotency_key)
        case ApprovalCardPart():
            return await send_card(
                transport,
                target,
                part.text,
                approval_id=part.approval_id,
                idempotency_key=idempotency_key,
            )
        case EditPart() | DeletePart():
            # they change an earlier message (gateway.outbox.retouch), never sent alone
            raise DeliveryError(f"a {part.kind} part is not sent on its own", permanent=True)


class _OffWire:
    """The chat's pacing budget as one claimed delivery draws on it (``Budget``): a wait is
    spent here, marked on the row as "waiting, not on the wire" (``wait_off_wire``), and the
    caller goes on at once (0 is returned). A reservation needing no wait writes nothing."""

    def __init__(self, worker: DeliveryWorker, delivery: DeliveryRecord) -> None:
        self._worker = worker
        self._delivery = delivery

    async def reserve(self, rules: Rules, max_wait: float = NO_LIMIT) -> float:
        wait = await self._worker._budget.reserve(rules, max_wait)
        if wait > max_wait:
            return wait  # nothing reserved
        if wait > 0:
            await self._worker.wait_off_wire(self._delivery, wait)
        return 0.0

    async def hold(self, rules: Rules, seconds: float) -> None:
        await self._worker._budget.hold(rules, seconds)
