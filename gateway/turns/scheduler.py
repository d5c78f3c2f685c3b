"""The turn scheduler: one agent run at a time per session, across every replica.

A worker claims a session with unanswered messages by taking its lease in PostgreSQL (row lock
+ SKIP LOCKED, a fencing token, an expiry renewed while the agent runs). The replies and their
delivery rows are written in one transaction that succeeds only while the lease is still ours,
so a worker that stalled past its lease cannot add a second answer. Messages that arrive during
a run move ``turn_requested_seq`` past what the run handles and get the next run, in seq order.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from gateway.agents.base import Agent, Turn
from gateway.core import tracing
from gateway.core.domain import Reply
from gateway.core.errors import LeaseLost, StoreError
from gateway.core.hub import PollGate, Signal
from gateway.core.lifecycle.guards import Guard, race, renewal_interval, stop_guards
from gateway.core.lifecycle.supervisor import Beat, item_backoff, no_beat, pause, persist
from gateway.core.metrics import Metrics
from gateway.core.ports import Transport
from gateway.tools.runner import ApprovalPending
from gateway.turns.outgoing import outgoing, rewritten
from gateway.turns.pipeline import Pipeline
from gateway.turns.stage import (
    AgentRequest,
    Stage,
    TurnRun,
    as_context,
    asks_for_answer,
    is_scheduled,
    one_firing_a_turn,
)
from gateway.turns.watch import cut_short, stopped_reply, watch_interval, watch_turn
from session_store.records import DeliveryRecord, MessageRecord, TurnClaim
from session_store.repos.tools import ToolStore
from session_store.store import Store

log = structlog.get_logger(__name__)

#: AGENT_BUSY_MODE=interrupt restarts a run at most this often, so a chatty thread still
#: gets an answer (the last run then sees everything that arrived)
MAX_INTERRUPTS = 3
#: unanswered messages read with the claim (and per delta read)
PENDING_LIMIT = 1000
#: context rows read with the claim (``ContextAssembler.fetch_newest``'s first page)
CONTEXT_FIRST_PAGE = 64
#: a run starts over on its edited or deleted question at most this often (then the answer
#: goes to what the last run saw)
MAX_REVISIONS = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    lease_seconds: float = 30.0
    poll_seconds: float = 1.0
    workers: int = 8
    #: ``queue``: messages that arrive during a run get the next run; ``interrupt``: they
    #: cancel the running agent call and the run starts over with everything
    busy_mode: str = "queue"
    #: GATEWAY_WHILE_ANSWERING, for places whose profile does not set ``while_answering``:
    #: ``restart`` is ``interrupt`` for those places
    while_answering: str = "queue"


class TurnScheduler:
    """Claims turns and runs each through ``stages`` (``gateway.turns.stage``) around the
    agent call; every feature of a turn is a stage, and one that is off is not in the list."""

    def __init__(
        self,
        store: Store,
        agent: Agent,
        transports: Mapping[str, Transport],
        *,
        metrics: Metrics,
        wake: Signal,
        delivery_wake: Signal,
        settings: TurnSettings,
        stages: Sequence[Stage],
    ) -> None:
        self._store = store
        self._agent = agent
        self._pipeline = Pipeline(stages)
        self._transports = transports
        self._metrics = metrics
        self._wake = wake
        self._delivery_wake = delivery_wake
        self._settings = settings
        self._platforms = sorted(transports)
        #: the delivery worker of this process (set by the runtime), for the handoff
        self.handoff: Handoff | None = None
        self._polls = PollGate()

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages every turn runs, in order."""
        return self._pipeline.stages

    async def run(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            for n in range(self._settings.workers):
                group.create_task(self._worker(stopping), name=f"turn-worker-{n}")

    async def _worker(self, stopping: asyncio.Event) -> None:
        await self.work(stopping)

    async def work(self, stopping: asyncio.Event, beat: Beat = no_beat) -> None:
        """One turn worker: claim, run, repeat. A failed claim or a failed turn (any
        exception) is logged with its context and retried after a jittered backoff; the
        worker itself goes on (a session whose turn crashed is retried once its lease ends).

        Wake-ups are precise: each message that asks for a turn lets one worker
        claim (``WorkSignal``), a worker that found work looks again at once, and one that
        found nothing waits for the next wake-up or ``poll_seconds`` (work left by another
        replica, a lease that ran out). No claim is made just because a sibling made one."""
        failures = 0
        look = True  # at start: work may be waiting from before
        while not stopping.is_set():
            beat()
            woken = False
            # the session whose message woke this worker: claimed first (``claim_session``
            # says why), the longest-waiting one otherwise
            hint: int | None = None
            if not look:
                woken, hint = await self._wake.wake(self._settings.poll_seconds)
                if stopping.is_set():
                    return
                if not woken and not self._polls.due(self._settings.poll_seconds):
                    continue  # a sibling polled just now: one poll per process
            # the claim's span is written once the claim names its message's trace
            since = datetime.now(UTC) if tracing.enabled() else None
            try:
                claim = await self._store.turns.claim_turn(
                    lease_seconds=self._settings.lease_seconds,
                    platforms=self._platforms,
                    with_pending=PENDING_LIMIT,
                    context_page=CONTEXT_FIRST_PAGE,
                    prefer=hint,
                )
            except StoreError as exc:
                failures += 1
                log.warning("turn_claim_failed", error=str(exc), failures=failures)
                await pause(item_backoff(failures), stopping)
                look = True
                continue
            if claim is None:
                failures = 0
                look = False
                continue
            try:
                # look again when messages arrived during the run, or when this claim was
                # made on the poll or at start (a backlog no wake-up stands for)
                look = await self.run_turn(claim, beat=beat, claimed_since=since) or not woken
                failures = 0
            except Exception:
                failures += 1
                look = True
                log.exception(
                    "turn_crashed",
                    platform=claim.key.platform,
                    chat_id=claim.key.chat_id,
                    thread_id=claim.key.thread_id,
                    session_id=claim.session_id,
                    seq_no=claim.requested_seq,
                )
                self._metrics.turns.labels(claim.key.platform, "crashed").inc()
                await pause(item_backoff(failures), stopping)

    async def run_turn(
        self, claim: TurnClaim, *, beat: Beat = no_beat, claimed_since: datetime | None = None
    ) -> bool:
        """Run one claimed turn; True when another turn of this session is already due.
        ``claimed_since``: when the claim began (its span, while tracing is on)."""
        if not tracing.enabled():
            return await self._run_claimed(claim, beat)
        # the turn continues the trace of the message it answers, stored at its ingest
        # (by this process or another one, before a restart or not)
        asked = _traced_message(claim)
        ids = tracing.place_ids(
            claim.key,
            session_id=claim.session_id,
            message_id=None if asked is None else asked.external_id,
        )
        with tracing.span(
            "turn",
            {"gateway.seq_no": claim.requested_seq},
            parent=None if asked is None else asked.traceparent,
            ids=ids,
            start=claimed_since,  # the claim is the turn's first step
        ):
            with tracing.span("turn.claim", start=claimed_since):
                pass
            return await self._run_claimed(claim, beat)

    async def _run_claimed(self, claim: TurnClaim, beat: Beat) -> bool:
        structlog.contextvars.bind_contextvars(
            platform=claim.key.platform,
            chat_id=claim.key.chat_id,
            thread_id=claim.key.thread_id,
            session_id=claim.session_id,
            # the newest message that asked for this turn: ties its lines to that inbound event
            seq_no=claim.requested_seq,
        )
        started = time.perf_counter()
        more = False
        try:
            outcome, more = await self._run_turn(claim, beat)
            self._metrics.turns.labels(claim.key.platform, outcome).inc()
            self._metrics.turn_seconds.labels(claim.key.platform).observe(
                time.perf_counter() - started, exemplar=tracing.exemplar()
            )
            log.info(
                "turn_finished",
                outcome=outcome,
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
            )
        except LeaseLost:
            self._metrics.turns.labels(claim.key.platform, "lease_lost").inc()
            log.warning("turn_lease_lost")
        except asyncio.CancelledError:
            # shutting down mid-turn: hand the session back so another worker (or the next
            # start) runs it at once instead of waiting for the lease to expire
            with contextlib.suppress(StoreError, LeaseLost):
                await asyncio.shield(self._store.turns.release_turn(claim))
            raise
        except StoreError as exc:
            self._metrics.turns.labels(claim.key.platform, "store_error").inc()
            log.error("turn_store_error", error=str(exc), transient=exc.transient)
            # hand the session back as soon as the database answers again, so the turn
            # runs again at once instead of after the lease
            with contextlib.suppress(StoreError):
                await persist(
                    lambda: self._store.turns.release_turn(claim),
                    what="release_turn",
                    deadline=self._settings.lease_seconds,
                    session_id=claim.session_id,
                )
        finally:
            structlog.contextvars.unbind_contextvars(
                "platform", "chat_id", "thread_id", "session_id", "seq_no"
            )
        return more

    async def _run_turn(self, claim: TurnClaim, beat: Beat = no_beat) -> tuple[str, bool]:
        """The turn's outcome, and whether another turn of the session is due."""
        interrupts = 0
        revisions = 0
        #: the model calls of every run of this turn: a run that starts over is charged with
        #: the answer that ends the turn (the agent appends to it)
        spent: list[dict[str, Any]] = []
        # read with the claim; read again after an interrupt or when the claim's snapshot
        # missed the newest message
        prefetched = list(claim.pending) if claim.pending is not None else None
        while True:
            if prefetched is not None:
                pending, prefetched = prefetched, None
            else:
                pending = await self._store.sessions.pending(
                    claim.session_id, claim.done_seq, limit=PENDING_LIMIT
                )
            revised: dict[int, str | None] = {}
            if revisions:
                # the run starts over on its edited or deleted question, read as it is now
                revised = await self._revised(claim)
                pending = [_as_revised(m, revised.get(m.seq_no)) for m in pending]
            deleted = {seq for seq, text in revised.items() if text is None}
            resumed = claim.parked_seq is not None and claim.parked_seq > claim.done_seq
            if resumed:
                # a turn parked on an approval (gateway.tools.approvals) handles again what
                # it handled then (the request is tied to that question); later messages
                # get the next run
                pending = [m for m in pending if m.seq_no <= (claim.parked_seq or 0)]
            pending, cut = one_firing_a_turn(pending)
            handled_seq = pending[-1].seq_no if pending else claim.requested_seq
            # a message deleted before its answer is handled, never answered nor read (one
            # deleted while this turn ran: ``deleted``)
            pending = [m for m in pending if not m.deleted]
            asks = [m for m in pending if asks_for_answer(m) and m.seq_no not in deleted]
            if not asks:
                done = await self._store.outbox.finish_turn_outbox(
                    claim, handled_seq=handled_seq, replies=[], target=None
                )
                return ("deleted" if deleted else "nothing_to_answer"), done.more
            turn = _turn_run(claim, pending, handled_seq, asks, revised, deleted, spent)
            call = functools.partial(
                self._call_agent,
                turn,
                # a turn cut short of its pending messages would see them as new asks
                interruptible=interrupts < MAX_INTERRUPTS and not resumed and not cut,
                revisable=revisions < MAX_REVISIONS,
                beat=beat,
            )
            try:
                outcome = await self._pipeline.run(turn, call)
            except ApprovalPending as waiting:
                return await self._park(claim, waiting.approval_id, handled_seq)
            if outcome is None:
                if turn.restarted_by in ("edit", "delete"):
                    # its question was edited or deleted: start over on what it says now
                    revisions += 1
                    self._metrics.turns.labels(claim.key.platform, "revised").inc()
                    log.info("turn_revised", change=turn.restarted_by, revisions=revisions)
                    continue
                # new messages arrived (while_answering = restart): start over with them
                interrupts += 1
                self._metrics.turns.labels(claim.key.platform, "interrupted").inc()
                log.info("turn_interrupted", interrupts=interrupts)
                continue
            if turn.stopped:
                outcome = "stopped"
            return outcome, await self._finish(turn)

    async def _revised(self, claim: TurnClaim) -> dict[int, str | None]:
        """The claim's messages edited (seq: their newest text) or deleted (seq: ``None``)."""
        found = await self._store.turns.revisions(claim.session_id, claim.done_seq)
        return {
            seq: (text or "") if kind == "edit" else None for seq, (kind, text) in found.items()
        }

    async def _park(self, claim: TurnClaim, approval_id: str, handled_seq: int) -> tuple[str, bool]:
        """A tool call waits for an approval: hand the session back without finishing the
        turn, parked on the request, so no worker waits for a person. The decision (or the
        expiry) unparks it and the turn runs again; the asking message stays unanswered
        until then."""
        outcome = await ToolStore(self._store).park_turn(
            session_id=claim.session_id,
            owner=claim.owner,
            approval_id=approval_id,
            handled_seq=handled_seq,
        )
        if outcome == "lost":
            raise LeaseLost("turn lease lost while parking")
        if outcome == "decided":
            # decided (or ran out) meanwhile: run the turn again right away
            await self._store.turns.release_turn(claim)
            log.info("turn_park_raced", approval_id=approval_id)
            return "park_raced", True
        log.info("turn_parked", approval_id=approval_id, handled_seq=handled_seq)
        return "parked", False

    async def _call_agent(
        self,
        turn: TurnRun,
        request: Turn,
        *,
        interruptible: bool,
        revisable: bool = True,
        beat: Beat = no_beat,
    ) -> Sequence[Reply] | None:
        """The agent's replies, its lease renewed meanwhile; ``None`` when the run starts
        over (new messages under ``while_answering = restart``, or its question edited or
        deleted: ``turn.restarted_by`` says which). A stop (``/stop``, a stop reaction)
        cancels the model request and its tool calls and returns what was written so far,
        marked stopped, charged for the tokens used."""
        claim = turn.claim
        agent_task = asyncio.create_task(self._agent.respond(request), name="agent-respond")
        guards = (
            Guard(
                self._renewal_seconds,
                lambda first: self._keep_lease(claim, beat, first=first),
                "turn-lease",
            ),
            Guard(
                watch_interval(self._settings.poll_seconds),
                lambda first: watch_turn(
                    self._store,
                    turn,
                    poll_seconds=self._settings.poll_seconds,
                    limit=PENDING_LIMIT,
                    restart_on_new=interruptible and self._restarts_on_new(turn),
                    revisable=revisable,
                    first=first,
                ),
                "turn-watch",
            ),
        )
        started_at = time.perf_counter()
        started: list[asyncio.Task[Any]] = []
        try:
            # the lease renewal and the watch start only if the agent is still writing when
            # they would first act (``race``)
            done, started = await race(agent_task, guards)
            renew, watch = started or (None, None)
            if renew in done:
                agent_task.cancel()
                renew.result()  # raises LeaseLost
                raise LeaseLost("lease renewal stopped")
            if watch in done and agent_task not in done:
                change = watch.result()
                agent_task.cancel()  # the model request and any tool call in flight
                await asyncio.gather(agent_task, return_exceptions=True)
                if change.kind == "stop":
                    return [stopped_reply(turn, request, change)]
                if request.spent is not None:
                    request.spent.extend(cut_short(turn, request))
                turn.restarted_by = change.kind
                turn.discard_previews = change.kind == "delete"
                return None
            return await agent_task
        finally:
            self._metrics.agent_seconds.labels(self._agent.name).observe(
                time.perf_counter() - started_at, exemplar=tracing.exemplar()
            )
            if not agent_task.done():
                agent_task.cancel()
                await asyncio.gather(agent_task, return_exceptions=True)
            await stop_guards(started)

    @property
    def _renewal_seconds(self) -> float:
        """How often a running turn's lease is renewed."""
        return renewal_interval(self._settings.lease_seconds)

    def _restarts_on_new(self, turn: TurnRun) -> bool:
        """``while_answering = restart`` here (the place's profile, else the setting; the
        older ``AGENT_BUSY_MODE=interrupt`` too)."""
        if self._settings.busy_mode == "interrupt":
            return True
        own = turn.profile.while_answering if turn.profile is not None else None
        return (own or self._settings.while_answering) == "restart"

    async def _keep_lease(
        self, claim: TurnClaim, beat: Beat = no_beat, *, first: float | None = None
    ) -> None:
        """Renew the lease while the agent runs (each renewal is the worker's progress). A
        renewal the database cannot answer is retried: the lease is lost only when another
        worker took the session over (``LeaseLost``). ``first``: the wait before the first
        renewal (default: the interval)."""
        interval = self._renewal_seconds
        wait = interval if first is None else first
        while True:
            await asyncio.sleep(wait)
            wait = interval
            try:
                await self._store.turns.renew_turn(
                    claim, lease_seconds=self._settings.lease_seconds
                )
            except LeaseLost:
                raise
            except StoreError as exc:
                log.warning("turn_lease_renewal_failed", error=str(exc))
                beat()  # retrying through an outage is not being wedged
                continue
            beat()

    async def _finish(self, turn: TurnRun) -> bool:
        """Write the turn's answer; True when another turn of the session is due."""
        claim, handled_seq = turn.claim, turn.handled_seq
        target = turn.target
        replies = outgoing(
            self._transports[target.platform],
            turn.replies,
            handled_seq=handled_seq,
            finishes_stream=turn.previews_after is not None,
        )
        if turn.rewrites is not None:
            # an edited question's answer: edits the old answer's messages in place
            old = await persist(
                lambda: self._store.outbox.answer_parts(
                    claim.session_id, after_seq=turn.rewrites or 0, before_seq=handled_seq
                ),
                what="answer_parts",
                session_id=claim.session_id,
            )
            replies = rewritten(replies, old)
        # the answer is decided: write it through a database outage rather than ask the
        # agent again (fenced: a taken-over claim raises LeaseLost). The first part goes to
        # this process's delivery worker already claimed (no claim transaction)
        handoff = self.handoff
        # the handed part's claim token is ours: should a finish commit and its answer be lost
        # (the server stopped, the connection dropped), the retry finds the turn finished
        # (LeaseLost) and the part is handed back instead of staying claimed by nobody
        token = uuid.uuid4()
        try:
            done = await persist(
                lambda: self._store.outbox.finish_turn_outbox(
                    claim,
                    handled_seq=handled_seq,
                    replies=replies,
                    target=target,
                    close_session=turn.close_session,
                    previews_after=turn.previews_after,
                    charges=turn.charges,
                    # the sends continue this turn's trace, whoever makes them
                    traceparent=tracing.inject(),
                    hand_over=handoff is not None and handoff.accepting(),
                    lease_seconds=handoff.lease_seconds if handoff is not None else 60.0,
                    hand_token=token,
                ),
                what="finish_turn",
                session_id=claim.session_id,
            )
        except LeaseLost:
            if not await self._finished_by_us(token):
                raise
            return True  # whether more is due is unknown: look again
        if handoff is not None:
            for delivery in done.handed:
                handoff.hand_over(delivery)
        if done.deliveries > len(done.handed):
            self._delivery_wake.set()
        log.debug("turn_replies_recorded", reply_seqs=done.seqs, handled_seq=handled_seq)
        return done.more

    async def _finished_by_us(self, token: uuid.UUID) -> bool:
        """After a finish refused as taken over: did an earlier attempt of ours commit, its
        answer lost? Then the part it handed over under ``token`` is handed back, pending,
        for any delivery worker (nothing of it was sent). False when nothing was claimed
        under it (taken over indeed, or nothing handed: the rows are pending anyway)."""
        try:
            released = await persist(
                lambda: self._store.outbox.release_claims([token]), what="release_claims"
            )
        except StoreError as exc:
            log.warning("turn_handed_part_release_failed", error=str(exc))
            return False
        if not released:
            return False
        self._delivery_wake.set()
        log.warning("turn_finish_answer_lost", released=released)
        return True


def _turn_run(
    claim: TurnClaim,
    pending: list[MessageRecord],
    handled_seq: int,
    asks: list[MessageRecord],
    revised: dict[int, str | None],
    deleted: set[int],
    spent: list[dict[str, Any]],
) -> TurnRun:
    """One run of the claimed turn: the agent is asked with the people's and the schedules'
    messages (no commands, none ``deleted`` while the turn ran)."""
    return TurnRun(
        claim=claim,
        pending=pending,
        handled_seq=handled_seq,
        asks=asks,
        questions=list(asks),
        revised=revised,
        request=AgentRequest(
            new_messages=[
                as_context(m)
                for m in pending
                if (m.role == "user" or is_scheduled(m))
                and m.command is None
                and m.seq_no not in deleted
            ],
            spent=spent,
        ),
    )


def _as_revised(message: MessageRecord, text: str | None) -> MessageRecord:
    """``message`` with its edited text (``None``: not edited, or deleted)."""
    return message if text is None else dataclasses.replace(message, content=text)


def _traced_message(claim: TurnClaim) -> MessageRecord | None:
    """The newest message of the claim that asks for an answer and carries a trace context
    (else the newest with one): the trace this turn continues."""
    traced = [m for m in claim.pending or () if m.traceparent]
    asking = [m for m in traced if asks_for_answer(m)]
    found = asking or traced
    return found[-1] if found else None


class Handoff(Protocol):
    """Where a finished turn's first delivery goes, already claimed (``DeliveryWorker``)."""

    @property
    def lease_seconds(self) -> float: ...

    def accepting(self) -> bool: ...

    def hand_over(self, delivery: DeliveryRecord) -> None: ...
