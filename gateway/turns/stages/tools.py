"""Tools: the routed bundle offered to the agent, its loop and its approvals.

Before the agent: routes the question to a bundle of tools (its schemas are reserved out of the
prompt budget) and gives the agent the turn's toolbox, which parks the turn when a call waits
for an approval. After: the calls and results the toolbox recorded go into the transcript
ahead of the answer, and the answer records the routing decision.

Only in the list when tools are configured and the agent calls them (``offers_tools``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from gateway.agents.base import Agent, ToolAware
from gateway.core.domain import Reply
from gateway.tools.catalog import ToolCaller
from gateway.tools.routing import RoutingDecision
from gateway.tools.runner import TurnToolbox
from gateway.tools.service import Prepared
from gateway.turns.stage import Answer, Slot, Stage, TurnRun
from gateway.turns.stages.knowledge import passage_numbers

_PREPARED: Slot[Prepared] = Slot("tools")


class ToolRouting(Protocol):
    """Routes one turn to its tools (``gateway.tools.service.ToolService``)."""

    def prepare(
        self,
        caller: ToolCaller,
        text: str,
        *,
        count: Callable[[str], int],
        max_tokens: int | None = None,
        asked: Sequence[str] | None = None,
    ) -> Prepared: ...

    async def ask_families(
        self,
        decision: RoutingDecision,
        caller: ToolCaller,
        text: str,
        *,
        models: Sequence[str],
        place: str,
    ) -> tuple[str, ...] | None: ...


def _models(turn: TurnRun) -> tuple[str, ...]:
    """The models this turn's place may use (its profile's, else the turn's own)."""
    profile = turn.profile
    if profile is not None and profile.models:
        return profile.models
    chosen = (profile.model if profile is not None else None) or turn.request.model
    return (chosen,) if chosen else ()


def offers_tools(agent: Agent) -> bool:
    """Whether ``agent`` is offered tools (``uses_tools = False`` leaves the whole budget to
    the transcript)."""
    return not (isinstance(agent, ToolAware) and not agent.uses_tools)


class ToolsStage(Stage):
    name = "tools"

    def __init__(self, tools: ToolRouting, *, count: Callable[[str], int]) -> None:
        self._tools = tools
        #: raw tokens of a text (the context's counter), for the schemas' cost
        self._count = count

    async def before(self, turn: TurnRun) -> Answer | None:
        question = turn.question
        assert question is not None  # the pipeline runs stages only while one is open
        key = turn.claim.key
        caller = ToolCaller(
            session_id=turn.claim.session_id,
            platform=key.platform,
            scope=key.scope,
            chat_id=key.chat_id,
            thread_id=key.thread_id,
            user_id=question.sender_id,
            turn_seq=question.seq_no,
            target=turn.target,
            profile_tools=None if turn.profile is None else turn.profile.tools,
            passages=passage_numbers(turn),
        )
        asked = "\n".join(m.content for m in turn.pending if m.role == "user" and not m.command)
        prepared = self._tools.prepare(caller, asked, count=self._count)
        # keyword routing unsure: one short side query asks the model (off the hot path of
        # confident turns); a failure or late answer offers the read-only bundle
        families = await self._tools.ask_families(
            prepared.bundle.decision,
            caller,
            asked,
            models=_models(turn),
            place=key.chat_text,
        )
        if families is not None:
            prepared = self._tools.prepare(caller, asked, count=self._count, asked=families)
        turn.put(_PREPARED, prepared)
        turn.request.reserved_tokens += prepared.bundle.schema_tokens
        turn.request.tools = prepared.bundle.schemas
        toolbox = prepared.toolbox
        if toolbox is not None:
            turn.request.toolbox = toolbox
            turn.hold_when(lambda: toolbox.parked)
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        prepared = turn.get(_PREPARED)
        if prepared is None:
            return replies
        routing = {
            "routing": prepared.bundle.decision.to_json(),
            "offered_tools": list(prepared.bundle.names),
        }
        answer = [replace(r, metadata={**r.metadata, **routing}) for r in replies]
        return tool_exchange(prepared.toolbox) + answer


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
