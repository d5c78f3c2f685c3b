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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import structlog

from gateway.agents import Agent, ContextMessage, Turn
from gateway.domain import Reply, ReplyTarget
from gateway.errors import AgentError, LeaseLost, StoreError
from gateway.hub import Signal
from gateway.metrics import Metrics
from gateway.ports import Transport
from gateway.text import split_text
from session_store.records import MessageRecord, TurnClaim
from session_store.store import OutgoingReply, Store

log = structlog.get_logger(__name__)

HELP_TEXT = (
    "I answer in this thread, with this thread's history as context.\n"
    "Commands:\n"
    "/new - start a fresh session here (this thread only)\n"
    "/help - this message"
)
NEW_TEXT = "Started a new session. Earlier messages in this thread are no longer used as context."
COMMAND_MODEL = "command"
TYPING_INTERVAL = 4.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    lease_seconds: float = 30.0
    poll_seconds: float = 1.0
    context_window: int = 50
    workers: int = 8


class TurnScheduler:
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
    ) -> None:
        self._store = store
        self._agent = agent
        self._transports = transports
        self._metrics = metrics
        self._wake = wake
        self._delivery_wake = delivery_wake
        self._settings = settings
        self._platforms = sorted(transports)

    async def run(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            for n in range(self._settings.workers):
                group.create_task(self._worker(stopping), name=f"turn-worker-{n}")

    async def _worker(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                claim = await self._store.claim_turn(
                    lease_seconds=self._settings.lease_seconds, platforms=self._platforms
                )
            except StoreError as exc:
                log.warning("turn_claim_failed", error=str(exc))
                await asyncio.sleep(self._settings.poll_seconds)
                continue
            if claim is None:
                await self._wake.wait(self._settings.poll_seconds)
                continue
            # other workers may find more due sessions; don't let them sleep on our wake-up
            self._wake.set()
            await self.run_turn(claim)

    async def run_turn(self, claim: TurnClaim) -> None:
        structlog.contextvars.bind_contextvars(
            platform=claim.key.platform,
            chat_id=claim.key.chat_id,
            thread_id=claim.key.thread_id,
            session_id=claim.session_id,
        )
        started = time.perf_counter()
        try:
            outcome = await self._run_turn(claim)
            self._metrics.turns.labels(claim.key.platform, outcome).inc()
            self._metrics.turn_seconds.labels(claim.key.platform).observe(
                time.perf_counter() - started
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
                await asyncio.shield(self._store.release_turn(claim))
            raise
        except StoreError as exc:
            self._metrics.turns.labels(claim.key.platform, "store_error").inc()
            log.error("turn_store_error", error=str(exc))
            with contextlib.suppress(StoreError):
                await self._store.release_turn(claim)
        finally:
            structlog.contextvars.unbind_contextvars(
                "platform", "chat_id", "thread_id", "session_id"
            )

    async def _run_turn(self, claim: TurnClaim) -> str:
        pending = await self._store.delta(claim.session_id, claim.done_seq, limit=1000)
        handled_seq = pending[-1].seq_no if pending else claim.requested_seq
        asks = [m for m in pending if m.role == "user" and m.trigger == "answer"]
        if not asks:
            await self._store.finish_turn(claim, handled_seq=handled_seq, replies=[], target=None)
            return "nothing_to_answer"

        for ask in asks:
            if ask.command == "new":
                # handle up to /new; anything after it in this batch gets its own run
                target = _target_of(ask)
                await self._finish(
                    claim,
                    handled_seq=ask.seq_no,
                    target=target,
                    replies=[Reply(text=NEW_TEXT, model=COMMAND_MODEL)],
                    close=True,
                )
                return "command_new"

        commands = [m for m in asks if m.command == "help"]
        questions = [m for m in asks if m.command is None]
        replies: list[Reply] = [Reply(text=HELP_TEXT, model=COMMAND_MODEL) for _ in commands]
        target = _target_of(asks[-1])
        outcome = "command_help"
        if questions:
            target = _target_of(questions[-1])
            agent_replies, outcome = await self._ask_agent(claim, target, pending)
            replies.extend(agent_replies)
        await self._finish(claim, handled_seq=handled_seq, target=target, replies=replies)
        return outcome

    async def _ask_agent(
        self, claim: TurnClaim, target: ReplyTarget, pending: Sequence[MessageRecord]
    ) -> tuple[list[Reply], str]:
        recent = await self._store.recent(claim.session_id, self._settings.context_window)
        newest_pending = max(m.seq_no for m in pending)
        context = [_context(m) for m in recent if _is_context(m) and m.seq_no <= newest_pending]
        new_messages = [_context(m) for m in pending if m.role == "user" and m.command is None]
        turn = Turn(
            session_id=claim.session_id,
            key=claim.key,
            target=target,
            context=context,
            new_messages=new_messages,
            selected_model=claim.selected_model,
        )
        typing = asyncio.create_task(self._keep_typing(target), name="typing-indicator")
        renew = asyncio.create_task(self._keep_lease(claim), name="turn-lease-renewal")
        agent_task = asyncio.create_task(self._agent.respond(turn), name="agent-respond")
        started = time.perf_counter()
        try:
            done, _ = await asyncio.wait({agent_task, renew}, return_when=asyncio.FIRST_COMPLETED)
            if renew in done:
                agent_task.cancel()
                renew.result()  # raises LeaseLost
                raise LeaseLost("lease renewal stopped")
            try:
                return list(agent_task.result()), "answered"
            except AgentError as exc:
                log.warning("agent_failed", error=str(exc))
                return [_apology(str(exc))], "agent_failed"
            except Exception as exc:
                # the agent is user code: any failure
                # becomes a visible apology in the thread, never a dead worker
                log.exception("agent_crashed")
                return [_apology(f"{type(exc).__name__}: {exc}")], "agent_failed"
        finally:
            self._metrics.agent_seconds.labels(self._agent.name).observe(
                time.perf_counter() - started
            )
            for task in (typing, renew, agent_task):
                task.cancel()
            await asyncio.gather(typing, renew, agent_task, return_exceptions=True)

    async def _keep_typing(self, target: ReplyTarget) -> None:
        transport = self._transports.get(target.platform)
        if transport is None:
            return
        while True:
            try:
                await transport.typing(target)
            except Exception as exc:  # noqa: BLE001 - a typing indicator is cosmetic:
                # its failure must never fail the turn
                log.debug("typing_failed", error=str(exc))
            await asyncio.sleep(TYPING_INTERVAL)

    async def _keep_lease(self, claim: TurnClaim) -> None:
        interval = self._settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            await self._store.renew_turn(claim, lease_seconds=self._settings.lease_seconds)

    async def _finish(
        self,
        claim: TurnClaim,
        *,
        handled_seq: int,
        target: ReplyTarget,
        replies: Sequence[Reply],
        close: bool = False,
    ) -> None:
        transport = self._transports[target.platform]
        outgoing = []
        for reply in replies:
            parts = split_text(reply.text, transport.max_message_length, transport.measure)
            if not parts:
                continue
            outgoing.append(OutgoingReply(reply=reply, parts=[transport.format(p) for p in parts]))
        seqs = await self._store.finish_turn(
            claim,
            handled_seq=handled_seq,
            replies=outgoing,
            target=target,
            close_session=close,
        )
        if seqs:
            self._delivery_wake.set()
        log.info("turn_replies_recorded", reply_seqs=seqs, handled_seq=handled_seq)


def _target_of(message: MessageRecord) -> ReplyTarget:
    if message.reply_target is None:
        raise StoreError(f"message {message.id} has no stored reply target")
    return message.reply_target


def _is_context(m: MessageRecord) -> bool:
    if m.role == "user":
        return m.command is None
    return m.model != COMMAND_MODEL


def _context(m: MessageRecord) -> ContextMessage:
    return ContextMessage(
        seq_no=m.seq_no, role=m.role, content=m.content, sender_name=m.sender_name
    )


def _apology(reason: str) -> Reply:
    short = reason if len(reason) <= 200 else reason[:197] + "..."
    return Reply(
        text=f"Sorry, I could not answer that just now ({short}). Please try again.",
        model=COMMAND_MODEL,
        metadata={"error": reason, "failed_turn": True},
    )
