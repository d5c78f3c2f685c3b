"""An ordered list of stages run around one agent call (``gateway.turns.stage.Stage``).

The pipeline knows nothing of leases or the database: the scheduler gives it the agent call
(which renews the lease and may be interrupted) and writes what the run ends with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence

import structlog

from gateway.agents.base import Turn
from gateway.core import tracing
from gateway.core.domain import Reply
from gateway.core.errors import AgentError, LeaseLost
from gateway.tools.runner import ApprovalPending
from gateway.turns.stage import Stage, TurnRun, apology

log = structlog.get_logger(__name__)

#: the agent call: its replies, or None when new messages interrupted it (the run starts over)
AgentCall = Callable[[Turn], Awaitable[Sequence[Reply] | None]]


class Pipeline:
    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = tuple(stages)

    async def run(self, turn: TurnRun, call: AgentCall) -> str | None:
        """Run ``turn`` through the stages and the agent; the outcome (the answer is in
        ``turn.replies``), or None when the agent call was interrupted. Raises
        ``ApprovalPending`` when the turn waits for an approval (it parks)."""
        ran: list[Stage] = []
        try:
            for stage in self.stages:
                if not turn.questions:
                    return turn.outcome  # answered without the agent (commands only)
                ran.append(stage)
                with tracing.span(f"turn.{stage.name}"):  # e.g. turn.context: its building
                    answer = await stage.before(turn)
                if answer is not None:
                    return turn.end_with(answer)
            if not turn.questions:
                return turn.outcome
            return await self._ask(turn, call)
        finally:
            for stage in reversed(ran):
                await stage.close(turn)

    async def _ask(self, turn: TurnRun, call: AgentCall) -> str | None:
        request = turn.request.build(turn)
        failure: Exception | None = None
        replies: Sequence[Reply] | None = None
        async with contextlib.AsyncExitStack() as around:
            for stage in self.stages:
                await around.enter_async_context(stage.around(turn))
            try:
                with tracing.span("turn.agent", {"gateway.model": turn.request.model}):
                    replies = await call(request)
                if replies is None:
                    return None
            except LeaseLost:
                raise
            except Exception as exc:  # noqa: BLE001 - the agent may be user code: any failure becomes a visible apology below, never a dead worker
                failure = exc
        held = turn.held_by()
        if held is not None:
            # a tool waits for an approval: the turn parks (whether the agent let
            # ``ApprovalPending`` through or swallowed it)
            raise ApprovalPending(held)
        model = turn.request.model
        if isinstance(failure, AgentError):
            cause = getattr(failure, "cause", None)
            log.warning("agent_failed", error=str(failure), model=model, cause=cause)
            turn.replies.append(apology(str(failure), model=model, cause=cause))
            return "agent_failed"
        if failure is not None:
            log.error("agent_crashed", exc_info=failure)
            reason = f"{type(failure).__name__}: {failure}"
            turn.replies.append(apology(reason, model=model))
            return "agent_failed"
        answer = list(replies or ())
        for stage in reversed(self.stages):
            answer = await stage.after(turn, answer)
        turn.replies.extend(answer)
        return "answered"
