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
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from gateway.agents import Agent, Calibrating, ContextMessage, StreamSink, ToolAware, Turn
from gateway.context import Assembled, ContextAssembler, ContextPolicy, TokenCounter
from gateway.domain import Reply, ReplyTarget
from gateway.errors import AgentError, ContextTooSmall, LeaseLost, StoreError
from gateway.files import outbox_parts
from gateway.hub import PollGate, Signal
from gateway.knowledge.service import Knowledge
from gateway.metrics import Metrics
from gateway.outbox.parts import stored
from gateway.ports import Transport
from gateway.streaming import Streams
from gateway.summaries import SummaryJob, SummaryWorker
from gateway.supervisor import Beat, item_backoff, no_beat, pause, persist
from gateway.tools.catalog import ToolCaller
from gateway.tools.runner import ApprovalPending, TurnToolbox
from gateway.tools.service import ToolService
from gateway.typing_indicator import hold_typing
from session_store.records import DeliveryRecord, MessageRecord, OutgoingReply, TurnClaim
from session_store.store import Store
from session_store.tool_store import ToolStore

log = structlog.get_logger(__name__)

HELP_TEXT = (
    "I answer in this thread, with this thread's history as context.\n"
    "Commands:\n"
    "/new - start a fresh session here (this thread only)\n"
    "/model - list the models; /model NAME - use NAME in this thread\n"
    "/help - this message"
)
NEW_TEXT = "Started a new session. Earlier messages in this thread are no longer used as context."
COMMAND_MODEL = "command"
#: AGENT_BUSY_MODE=interrupt restarts a run at most this often, so a chatty thread still
#: gets an answer (the last run then sees everything that arrived)
MAX_INTERRUPTS = 3
#: unanswered messages read with the claim (and per delta read)
PENDING_LIMIT = 1000
#: seconds a turn runs before the typing indicator is shown
TYPING_DELAY = 0.25
#: context rows read with the claim (``ContextAssembler.fetch_newest``'s first page)
CONTEXT_FIRST_PAGE = 64


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnSettings:
    lease_seconds: float = 30.0
    poll_seconds: float = 1.0
    workers: int = 8
    #: ``queue``: messages that arrive during a run get the next run; ``interrupt``: they
    #: cancel the running agent call and the run starts over with everything
    busy_mode: str = "queue"


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
        context: ContextAssembler | None = None,
        summaries: SummaryWorker | None = None,
        tools: ToolService | None = None,
        knowledge: Knowledge | None = None,
        streams: Streams | None = None,
    ) -> None:
        self._store = store
        #: streaming previews (issue 16); None or a non-streaming agent: answers in one piece
        self._streams = streams
        self._agent = agent
        self._context = context or ContextAssembler(store, ContextPolicy(), TokenCounter())
        self._summaries = summaries
        self._tools = tools
        self._transports = transports
        self._metrics = metrics
        self._wake = wake
        self._delivery_wake = delivery_wake
        self._settings = settings
        self._platforms = sorted(transports)
        self._knowledge = knowledge
        #: the delivery worker of this process (set by the runtime), for the handoff
        self.handoff: Handoff | None = None
        self._polls = PollGate()

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

        Wake-ups are precise (issue 17): each message that asks for a turn lets one worker
        claim (``WorkSignal``), a worker that found work looks again at once, and one that
        found nothing waits for the next wake-up or ``poll_seconds`` (work left by another
        replica, a lease that ran out). No claim is made just because a sibling made one."""
        failures = 0
        look = True  # at start: work may be waiting from before
        while not stopping.is_set():
            beat()
            woken = False
            if not look:
                woken = await self._wake.wait(self._settings.poll_seconds)
                if stopping.is_set():
                    return
                if not woken and not self._polls.due(self._settings.poll_seconds):
                    continue  # a sibling polled just now: one poll per process
            try:
                claim = await self._store.claim_turn(
                    lease_seconds=self._settings.lease_seconds,
                    platforms=self._platforms,
                    with_pending=PENDING_LIMIT,
                    context_page=CONTEXT_FIRST_PAGE,
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
                look = await self.run_turn(claim, beat=beat) or not woken
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

    async def run_turn(self, claim: TurnClaim, *, beat: Beat = no_beat) -> bool:
        """Run one claimed turn; True when another turn of this session is already due."""
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
            log.error("turn_store_error", error=str(exc), transient=exc.transient)
            # hand the session back as soon as the database answers again, so the turn
            # runs again at once instead of after the lease
            with contextlib.suppress(StoreError):
                await persist(
                    lambda: self._store.release_turn(claim),
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
        # read with the claim (issue 17); read again after an interrupt or when the claim's
        # snapshot missed the newest message
        prefetched = list(claim.pending) if claim.pending is not None else None
        while True:
            if prefetched is not None:
                pending, prefetched = prefetched, None
            else:
                pending = await self._store.delta(
                    claim.session_id, claim.done_seq, limit=PENDING_LIMIT
                )
            resumed = claim.parked_seq is not None and claim.parked_seq > claim.done_seq
            if resumed:
                # a turn parked on an approval (gateway.tools.approvals) handles again what
                # it handled then (the request is tied to that question); later messages
                # get the next run
                pending = [m for m in pending if m.seq_no <= (claim.parked_seq or 0)]
            handled_seq = pending[-1].seq_no if pending else claim.requested_seq
            asks = [m for m in pending if m.role == "user" and m.trigger == "answer"]
            if not asks:
                done = await self._store.finish_turn_outbox(
                    claim, handled_seq=handled_seq, replies=[], target=None
                )
                return "nothing_to_answer", done.more

            for ask in asks:
                if ask.command == "new":
                    # handle up to /new; anything after it in this batch gets its own run
                    target = _target_of(ask)
                    more = await self._finish(
                        claim,
                        handled_seq=ask.seq_no,
                        target=target,
                        replies=[Reply(text=NEW_TEXT, model=COMMAND_MODEL)],
                        close=True,
                    )
                    return "command_new", more

            # commands in seq order, so "/model x" sent before a question applies to it
            replies: list[Reply] = []
            for ask in asks:
                if ask.command == "help":
                    replies.append(Reply(text=HELP_TEXT, model=COMMAND_MODEL))
                elif ask.command == "model":
                    replies.append(await self._model_command(claim, ask))
            questions = [m for m in asks if m.command is None]
            target = _target_of(asks[-1])
            outcome = f"command_{asks[-1].command}"
            previews_after: int | None = None
            if questions:
                target = _target_of(questions[-1])
                stream = (
                    None
                    if self._streams is None
                    else await self._streams.open(
                        self._agent,
                        session_id=claim.session_id,
                        after_seq=claim.done_seq,
                        target=target,
                    )
                )
                try:
                    answer = await self._ask_agent(
                        claim,
                        target,
                        pending,
                        question=questions[-1],
                        handled_seq=handled_seq,
                        interruptible=interrupts < MAX_INTERRUPTS and not resumed,
                        beat=beat,
                        stream=stream,
                    )
                except ApprovalPending as waiting:
                    return await self._park(claim, waiting.approval_id, handled_seq)
                finally:
                    if stream is not None:
                        await stream.close()
                previews_after = stream.previews_after if stream is not None else None
                if answer is None:
                    # AGENT_BUSY_MODE=interrupt: new messages arrived; start over with them
                    interrupts += 1
                    self._metrics.turns.labels(claim.key.platform, "interrupted").inc()
                    log.info("turn_interrupted", interrupts=interrupts)
                    continue
                agent_replies, outcome = answer
                replies.extend(agent_replies)
            more = await self._finish(
                claim,
                handled_seq=handled_seq,
                target=target,
                replies=replies,
                previews_after=previews_after,
            )
            return outcome, more

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
            await self._store.release_turn(claim)
            log.info("turn_park_raced", approval_id=approval_id)
            return "park_raced", True
        log.info("turn_parked", approval_id=approval_id, handled_seq=handled_seq)
        return "parked", False

    async def _model_command(self, claim: TurnClaim, ask: MessageRecord) -> Reply:
        """``/model``: list the allowed models; ``/model NAME``: this session uses NAME, and
        it becomes this person's choice wherever no session choice is set."""
        policy = self._context.policy
        allowed = policy.allowed
        wanted = _command_argument(ask.content, "model")
        if wanted is None:
            state = await self._store.turn_state(
                claim.session_id,
                question_seq=ask.seq_no,
                upto_seq=ask.seq_no,
                user_platform=claim.key.platform,
                user_id=ask.sender_id,
            )
            current, _ = policy.resolve(
                session_choice=state.selected_model, user_choice=state.user_model
            )
            lines = ["Models:"]
            for model in allowed:
                flags = (
                    ("default", model == policy.default_model),
                    ("in use here", model == current),
                )
                notes = [note for note, on in flags if on]
                lines.append(f"- {model}" + (f" ({', '.join(notes)})" if notes else ""))
            lines.append("Switch this thread with /model NAME.")
            return Reply(text="\n".join(lines), model=COMMAND_MODEL)
        name = next((m for m in allowed if m == wanted), None) or next(
            (m for m in allowed if m.lower() == wanted.lower()), None
        )
        if name is None:
            return Reply(
                text=f"Unknown model {wanted!r}. Available: {', '.join(allowed)}.",
                model=COMMAND_MODEL,
            )
        await self._store.set_model_choice(
            claim.session_id, platform=claim.key.platform, user_id=ask.sender_id, model=name
        )
        log.info("model_selected", model=name)
        return Reply(
            text=f"This thread now uses {name} (and so will new threads of yours that have "
            "no model of their own).",
            model=COMMAND_MODEL,
        )

    async def _ask_agent(
        self,
        claim: TurnClaim,
        target: ReplyTarget,
        pending: Sequence[MessageRecord],
        *,
        question: MessageRecord,
        handled_seq: int,
        interruptible: bool,
        beat: Beat = no_beat,
        stream: StreamSink | None = None,
    ) -> tuple[list[Reply], str] | None:
        """Run the agent on this session's context; ``None`` when the run was interrupted by
        new messages (``AGENT_BUSY_MODE=interrupt``)."""
        # tools (issue 14): the routed bundle's schemas come out of the prompt budget
        tools = None
        if self._tools is not None and not (
            isinstance(self._agent, ToolAware) and not self._agent.uses_tools
        ):
            caller = ToolCaller(
                session_id=claim.session_id,
                platform=claim.key.platform,
                scope=claim.key.scope,
                chat_id=claim.key.chat_id,
                thread_id=claim.key.thread_id,
                user_id=question.sender_id,
                turn_seq=question.seq_no,
                target=target,
            )
            asked = "\n".join(m.content for m in pending if m.role == "user" and not m.command)
            tools = self._tools.prepare(caller, asked, count=self._context.counter.text)
        tool_tokens = tools.bundle.schema_tokens if tools is not None else 0
        try:
            ctx = await self._context.assemble(
                session_id=claim.session_id,
                key=claim.key,
                target=target,
                upto_seq=handled_seq,
                question_seq=question.seq_no,
                user_id=question.sender_id,
                tool_tokens=self._context.counter.calibrated(
                    self._context.policy.default_model, tool_tokens
                ),
                prefetched=claim.context,
            )
        except ContextTooSmall as exc:
            log.warning("context_too_small", error=str(exc))
            return [_apology(str(exc))], "agent_failed"
        self._note_context(claim, ctx, handled_seq)
        # knowledge base (issue 15): files shared here, passages for the question
        knowledge = (
            None
            if self._knowledge is None
            else await self._knowledge.prepare_turn(
                claim.key,
                target,
                question,
                pending,
                transport=self._transports.get(claim.key.platform),
                token_budget=ctx.prompt_budget - ctx.estimated_tokens,
                wait_seconds=self._settings.lease_seconds / 2,
            )
        )
        new_messages = [_context(m) for m in pending if m.role == "user" and m.command is None]
        turn = Turn(
            session_id=claim.session_id,
            key=claim.key,
            target=target,
            context=ctx.messages,
            new_messages=new_messages,
            selected_model=ctx.model if ctx.model_source == "session" else None,
            model=ctx.model,
            system_prompt=ctx.system_prompt
            if knowledge is None or not knowledge.prompt
            else f"{ctx.system_prompt}\n\n{knowledge.prompt}",
            summary=ctx.summary,
            context_window=ctx.window,
            max_output_tokens=ctx.max_output_tokens,
            estimated_prompt_tokens=ctx.estimated_tokens,
            session_metadata=ctx.session_metadata,
            tools=tools.bundle.schemas if tools is not None else (),
            toolbox=tools.toolbox if tools is not None else None,
            attachments=knowledge.parts if knowledge is not None else (),
            stream=stream,
        )
        typing = asyncio.create_task(
            self._keep_typing(target, streamed=stream is not None), name="typing-indicator"
        )
        renew = asyncio.create_task(self._keep_lease(claim, beat), name="turn-lease-renewal")
        agent_task = asyncio.create_task(self._agent.respond(turn), name="agent-respond")
        watch: asyncio.Task[None] | None = None
        if interruptible and self._settings.busy_mode == "interrupt":
            watch = asyncio.create_task(
                self._watch_new_asks(claim.session_id, handled_seq), name="turn-interrupt-watch"
            )
        started = time.perf_counter()
        try:
            waiting = {agent_task, renew} if watch is None else {agent_task, renew, watch}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if renew in done:
                agent_task.cancel()
                renew.result()  # raises LeaseLost
                raise LeaseLost("lease renewal stopped")
            if watch is not None and watch in done and agent_task not in done:
                return None  # the finally below cancels the agent call
            parked = tools.toolbox.parked if tools is not None and tools.toolbox else None
            if parked is not None:
                # a tool waits for an approval: the turn parks (whether the agent let
                # ``ApprovalPending`` through or swallowed it)
                raise ApprovalPending(parked)
            try:
                replies = list(agent_task.result())
                if knowledge is not None:  # knowledge base (issue 15): frozen citations
                    replies = knowledge.cite(replies)
            except AgentError as exc:
                log.warning("agent_failed", error=str(exc), model=ctx.model)
                return [_apology(str(exc), model=ctx.model)], "agent_failed"
            except Exception as exc:
                # the agent may be user code: any failure
                # becomes a visible apology in the thread, never a dead worker
                log.exception("agent_crashed")
                return [_apology(f"{type(exc).__name__}: {exc}", model=ctx.model)], "agent_failed"
            self._calibrate(ctx, replies, extra_raw=tool_tokens)
            if tools is not None:
                replies = tool_exchange(tools.toolbox) + [
                    replace(
                        r,
                        metadata={
                            **r.metadata,
                            "routing": tools.bundle.decision.to_json(),
                            "offered_tools": list(tools.bundle.names),
                        },
                    )
                    for r in replies
                ]
            return replies, "answered"
        finally:
            self._metrics.agent_seconds.labels(self._agent.name).observe(
                time.perf_counter() - started
            )
            tasks = [typing, renew, agent_task] + ([watch] if watch is not None else [])
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _note_context(self, claim: TurnClaim, ctx: Assembled, handled_seq: int) -> None:
        """Log and measure the prompt; ask for a summary when older turns were left out
        (cold path: ``request`` only notes the session)."""
        self._metrics.prompt_tokens.labels(ctx.model).observe(ctx.estimated_tokens)
        # debug: one info line per turn (``turn_finished``) is the summary (issue 17: log
        # volume was a tenth of the gateway's CPU)
        log.debug(
            "turn_context",
            model=ctx.model,
            model_source=ctx.model_source,
            window=ctx.window,
            prompt_budget=ctx.prompt_budget,
            estimated_prompt_tokens=ctx.estimated_tokens,
            context_messages=len(ctx.messages),
            evicted_messages=ctx.evicted_messages,
            truncated_messages=ctx.truncated_messages,
            summary_to_seq=ctx.summary.to_seq if ctx.summary else None,
        )
        if ctx.evicted and self._summaries is not None and self._context.policy.summaries:
            self._summaries.request(
                SummaryJob(
                    session_id=claim.session_id,
                    model=ctx.model,
                    upto_seq=handled_seq,
                    keep_raw=ctx.history_raw_budget // 2,
                )
            )

    def _calibrate(self, ctx: Assembled, replies: Sequence[Reply], *, extra_raw: int = 0) -> None:
        """Feed the server's prompt count back into the estimate, for agents that send the
        prompt exactly as we rendered it (``calibrates = True``)."""
        if not (isinstance(self._agent, Calibrating) and self._agent.calibrates) or not replies:
            return
        usage = replies[0].metadata.get("usage")
        actual = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
        if isinstance(actual, int):
            self._context.counter.observe(ctx.model, raw=ctx.raw_tokens + extra_raw, actual=actual)

    async def _watch_new_asks(self, session_id: int, handled_seq: int) -> None:
        """Returns once a message asking for an answer arrives after ``handled_seq``."""
        interval = min(self._settings.poll_seconds, 0.5)
        while True:
            await asyncio.sleep(interval)
            try:
                if await self._store.turn_requested_seq(session_id) > handled_seq:
                    return
            except StoreError as exc:
                log.debug("interrupt_watch_failed", error=str(exc))

    async def _keep_typing(self, target: ReplyTarget, *, streamed: bool = False) -> None:
        # only for a turn that takes a while (issue 17): a quick answer would arrive with
        # its indicator, and the indicator cost a platform call per message
        await asyncio.sleep(TYPING_DELAY)
        transport = self._transports.get(target.platform)
        if transport is not None:
            # renewed until cancelled, then cleared; a streamed turn's renewals share the
            # chat's budget with its preview edits
            budget = self._streams.budget if streamed and self._streams is not None else None
            await hold_typing(transport, target, budget=budget)

    async def _keep_lease(self, claim: TurnClaim, beat: Beat = no_beat) -> None:
        """Renew the lease while the agent runs (each renewal is the worker's progress). A
        renewal the database cannot answer is retried: the lease is lost only when another
        worker took the session over (``LeaseLost``)."""
        interval = self._settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._store.renew_turn(claim, lease_seconds=self._settings.lease_seconds)
            except LeaseLost:
                raise
            except StoreError as exc:
                log.warning("turn_lease_renewal_failed", error=str(exc))
                beat()  # retrying through an outage is not being wedged
                continue
            beat()

    async def _finish(
        self,
        claim: TurnClaim,
        *,
        handled_seq: int,
        target: ReplyTarget,
        replies: Sequence[Reply],
        close: bool = False,
        previews_after: int | None = None,
    ) -> bool:
        """Write the turn's answer; True when another turn of the session is due."""
        transport = self._transports[target.platform]
        outgoing = []
        for reply in replies:
            # where this reply sits in the transcript: after what it answered, even though
            # messages that arrived meanwhile have lower seq numbers (gateway.context)
            reply = replace(reply, metadata={**reply.metadata, "answers_seq": handled_seq})
            role = reply.exchange_role
            if role is not None:
                # a tool call or result: stored in the transcript, never delivered
                outgoing.append(
                    OutgoingReply(
                        content=reply.text,
                        parts=[],
                        model=reply.model,
                        metadata=reply.metadata,
                        role=role,
                    )
                )
                continue
            # streamed: the parts finish the previews (gateway.outbox.stream_finish)
            parts = outbox_parts(
                transport, reply.text, reply.files, finishes_stream=previews_after is not None
            )
            if not parts:
                continue
            outgoing.append(
                OutgoingReply(
                    content=reply.text,
                    parts=[stored(p) for p in parts],
                    model=reply.model,
                    tokens_used=reply.tokens_used,
                    metadata=reply.metadata,
                )
            )
        # the answer is decided: write it through a database outage rather than ask the
        # agent again (fenced: a taken-over claim raises LeaseLost). The first part goes to
        # this process's delivery worker already claimed (issue 17: no claim transaction)
        handoff = self.handoff
        done = await persist(
            lambda: self._store.finish_turn_outbox(
                claim,
                handled_seq=handled_seq,
                replies=outgoing,
                target=target,
                close_session=close,
                previews_after=previews_after,
                hand_over=handoff is not None and handoff.accepting(),
                lease_seconds=handoff.lease_seconds if handoff is not None else 60.0,
            ),
            what="finish_turn",
            session_id=claim.session_id,
        )
        if handoff is not None:
            for delivery in done.handed:
                handoff.hand_over(delivery)
        if done.deliveries > len(done.handed):
            self._delivery_wake.set()
        log.debug("turn_replies_recorded", reply_seqs=done.seqs, handled_seq=handled_seq)
        return done.more


class Handoff(Protocol):
    """Where a finished turn's first delivery goes, already claimed (``DeliveryWorker``)."""

    @property
    def lease_seconds(self) -> float: ...

    def accepting(self) -> bool: ...

    def hand_over(self, delivery: DeliveryRecord) -> None: ...


def tool_exchange(toolbox: TurnToolbox | None) -> list[Reply]:
    """The calls and results a turn's toolbox recorded, as transcript-only replies."""
    if toolbox is None:
        return []
    out: list[Reply] = []
    for x in toolbox.exchange:
        meta: dict[str, object] = {}
        if x.tool_calls:
            meta["tool_calls"] = [dict(c) for c in x.tool_calls]
        if x.tool_call_id is not None:
            meta.update(
                tool_call_id=x.tool_call_id,
                tool_name=x.tool_name,
                outcome=x.outcome,
                duration_ms=x.duration_ms,
            )
        out.append(
            Reply(
                text=x.content,
                model="tool" if x.role == "tool" else None,
                metadata=meta,
                exchange_role=x.role,
            )
        )
    return out


def _target_of(message: MessageRecord) -> ReplyTarget:
    if message.reply_target is None:
        raise StoreError(f"message {message.id} has no stored reply target")
    return message.reply_target


def _context(m: MessageRecord) -> ContextMessage:
    return ContextMessage(
        seq_no=m.seq_no,
        role=m.role,
        content=m.content,
        sender_name=m.sender_name,
        sender_id=m.sender_id,
    )


APOLOGY = "Sorry, I could not answer that just now. Please try again."


def _apology(reason: str, *, model: str | None = None) -> Reply:
    # the thread gets a plain message; the reason (model or upstream error text) stays in the
    # metadata, the logs and /ops (issue 13)
    metadata: dict[str, object] = {"error": reason, "failed_turn": True}
    if model is not None:
        metadata["agent_model"] = model
    return Reply(
        text=APOLOGY,
        model=COMMAND_MODEL,
        metadata=metadata,
    )


def _command_argument(text: str, command: str) -> str | None:
    """``/model gpt-4o`` (or ``/model@bot gpt-4o``, or after a mention) -> ``gpt-4o``."""
    words = text.split()
    for i, word in enumerate(words):
        if word.lower().split("@", 1)[0] == f"/{command}":
            return words[i + 1] if i + 1 < len(words) else None
    return None
