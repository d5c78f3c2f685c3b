"""Context: the newest summary and the newest whole turns that fit the model's budget.

Before the agent: sizes the prompt for the turn's model (leaving room for what earlier stages
reserved, such as tool schemas), fills the request, and asks for a summary when older turns
were left out; a window too small for the system prompt is refused with an apology. After:
feeds the server's prompt count back into the estimate (agents that ``calibrate``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import structlog

from gateway.agents.base import Agent, Calibrating, Turn
from gateway.agents.prompt import PROMPT_OVERHEAD, render_prompt
from gateway.core.domain import Reply
from gateway.core.errors import ContextTooSmall
from gateway.core.metrics import Metrics
from gateway.turns.context import Assembled, ContextAssembler, fit_turns
from gateway.turns.stage import Answer, Slot, Stage, TurnRun, apology
from gateway.turns.summaries import SummaryJob

log = structlog.get_logger(__name__)

_ASSEMBLED: Slot[Assembled] = Slot("context")


def _heard(turn: TurnRun) -> dict[int, str | None]:
    """The transcribed messages' text as this turn has it: whichever came first, the
    transcript or the claim that read the message, the model reads what was heard. A run that
    started over on its question edited or deleted (``TurnRun.revised``) reads it as it is now."""
    heard: dict[int, str | None] = {
        m.seq_no: m.content
        for m in turn.pending
        if m.role == "user" and m.metadata.get("transcribed")
    }
    heard.update(turn.revised)
    return heard


class SummaryRequests(Protocol):
    """Where a summary is asked for (``gateway.turns.summaries.SummaryWorker``)."""

    def request(self, job: SummaryJob) -> None: ...


class ContextStage(Stage):
    name = "context"

    def __init__(
        self,
        assembler: ContextAssembler,
        *,
        summaries: SummaryRequests,
        metrics: Metrics,
        agent: Agent,
    ) -> None:
        self._assembler = assembler
        self._summaries = summaries
        self._metrics = metrics
        #: the agent sends the prompt as rendered and reports the server's count of it
        self._calibrates = isinstance(agent, Calibrating) and agent.calibrates

    async def before(self, turn: TurnRun) -> Answer | None:
        question = turn.question
        assert question is not None  # the pipeline runs stages only while one is open
        assembler, request = self._assembler, turn.request
        try:
            ctx = await assembler.assemble(
                session_id=turn.claim.session_id,
                key=turn.claim.key,
                target=turn.target,
                upto_seq=turn.handled_seq,
                question_seq=question.seq_no,
                user_id=question.sender_id,
                tool_tokens=assembler.counter.calibrated(
                    (turn.policy or assembler.policy).default_model, request.reserved_tokens
                ),
                prefetched=turn.claim.context,
                policy=turn.policy,
                heard=_heard(turn),
            )
        except ContextTooSmall as exc:
            log.warning("context_too_small", error=str(exc))
            return Answer(outcome="agent_failed", replies=[apology(str(exc))])
        self._note(turn, ctx)
        turn.put(_ASSEMBLED, ctx)
        request.context = ctx.messages
        request.model = ctx.model
        request.selected_model = ctx.model if ctx.model_source == "session" else None
        request.system_prompt = ctx.system_prompt
        request.summary = ctx.summary
        request.context_window = ctx.window
        request.max_output_tokens = ctx.max_output_tokens
        request.prompt_budget = ctx.prompt_budget
        request.estimated_prompt_tokens = ctx.estimated_tokens
        request.session_metadata = ctx.session_metadata
        request.refit = functools.partial(self._refit, tool_raw=request.reserved_tokens)
        return None

    def _refit(self, turn: Turn, model: str, *, tool_raw: int) -> Turn:
        """``turn`` sized for ``model`` (a fallback): its window's budget, by the same rules,
        on the context already read; the newest whole turns that fit are kept."""
        assembler = self._assembler
        policy, counter = assembler.policy, assembler.counter
        budget = policy.prompt_budget(model, tool_tokens=counter.calibrated(model, tool_raw))
        factor = counter.factor(model)
        system_raw = counter.message({"role": "system", "content": turn.system_prompt})
        history = math.floor(budget / factor) - system_raw - PROMPT_OVERHEAD
        fit = fit_turns(list(turn.context), budget=max(history, 1), cost=assembler.cost)
        raw = counter.prompt(render_prompt(turn.system_prompt, fit.messages))
        log.info(
            "context_refit",
            model=model,
            window=policy.window(model),
            kept=len(fit.messages),
            evicted=fit.evicted_messages + fit.dropped_messages,
        )
        return dataclasses.replace(
            turn,
            model=model,
            context=fit.messages,
            context_window=policy.window(model),
            estimated_prompt_tokens=math.ceil(raw * factor),
        )

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        ctx = turn.get(_ASSEMBLED)
        if ctx is not None:
            self._calibrate(ctx, replies, extra_raw=turn.request.reserved_tokens)
        return replies

    def _note(self, turn: TurnRun, ctx: Assembled) -> None:
        """Log and measure the prompt; ask for a summary when older turns were left out
        (cold path: ``request`` only notes the session)."""
        self._metrics.prompt_tokens.labels(ctx.model).observe(ctx.estimated_tokens)
        # debug: the one info line per turn is ``turn_finished`` (log volume was a tenth of
        # the gateway's CPU)
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
        if ctx.evicted and self._assembler.policy.summaries:
            self._summaries.request(
                SummaryJob(
                    session_id=turn.claim.session_id,
                    model=ctx.model,
                    upto_seq=turn.handled_seq,
                    keep_raw=ctx.history_raw_budget // 2,
                )
            )

    def _calibrate(self, ctx: Assembled, replies: Sequence[Reply], *, extra_raw: int) -> None:
        """Feed the server's prompt count back into the estimate."""
        if not self._calibrates or not replies or replies[0].metadata.get("fallback_from"):
            return  # (a fallback's count is another model's)
        usage = replies[0].metadata.get("usage")
        actual = usage.get("prompt_tokens") if isinstance(usage, Mapping) else None
        if isinstance(actual, int):
            self._assembler.counter.observe(
                ctx.model, raw=ctx.raw_tokens + extra_raw, actual=actual
            )
