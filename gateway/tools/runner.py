"""One turn's toolbox: runs the model's calls under the catalog's policy.

Fail closed at call time too: a call to a tool that was not offered this turn, or that the
policy no longer allows for this caller, is refused without running. Each call has a timeout
and an output cap; anything a tool raises becomes an error result for the model. Calls of one
step run in parallel. Every call and result is recorded, to be stored with the turn.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

import structlog

from gateway.agents.base import ToolCall, ToolResult
from gateway.core import tracing
from gateway.core.errors import GatewayError
from gateway.core.metrics import Metrics
from gateway.tools.builtin import ToolInputError
from gateway.tools.catalog import Tool, ToolCaller, ToolPolicy, ToolPolicyCatalog, wire_name
from gateway.tools.truncate import cap_output

log = structlog.get_logger(__name__)

Decision = Literal["approved", "denied", "expired"]


class Approvals(Protocol):
    """Asks the asker in the thread before a ``confirm`` tool runs (``gateway.tools.approvals``)."""

    async def decide(
        self,
        call: ToolCall,
        arguments: Mapping[str, Any],
        policy: ToolPolicy,
        caller: ToolCaller,
        *,
        approvers: tuple[str, ...] = (),
    ) -> Decision: ...


class ApprovalPending(Exception):
    """A ``confirm`` tool's request is waiting for its decision: the request is stored and
    its card is on its way. The turn parks its session instead of waiting (no worker is
    held); the decision or the expiry makes the session due again, and the re-run finds the
    decided request under the same idempotency key. Agents (``module:callable`` ones too)
    let it propagate out of ``toolbox.run``."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"waiting for approval {approval_id}")
        self.approval_id = approval_id


class ToolFailed(GatewayError):
    """A tool's own failure (an MCP server's error result, a lost connection)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchanged:
    """One message of the tool exchange, as stored: an assistant message with calls, or a
    tool result."""

    role: Literal["assistant", "tool"]
    content: str
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None
    outcome: str | None = None
    duration_ms: float | None = None


@dataclass(kw_only=True)
class TurnToolbox:
    catalog: ToolPolicyCatalog
    caller: ToolCaller
    offered: frozenset[str]
    metrics: Metrics
    max_steps: int
    approvals: Approvals | None = None
    exchange: list[Exchanged] = field(default_factory=list)
    #: the pending request this turn parked on (``ApprovalPending``), even if the agent
    #: swallowed the exception
    parked: str | None = None

    def _resolve(self, called: str) -> str:
        """The catalog name of a called wire name (``files__read`` -> ``files.read``), only
        among the offered tools; anything else stays as called (and is refused)."""
        for name in self.offered:
            if wire_name(name) == called:
                return name
        return called

    async def run(self, calls: Sequence[ToolCall], *, content: str = "") -> list[ToolResult]:
        # a step runs only once every approval it needs is decided: all its requests are
        # asked for first (their cards go out together), and while one is pending nothing of
        # the step runs (``ApprovalPending``: the turn parks and re-runs after the decision)
        decisions = await self._approve(calls)
        self.exchange.append(
            Exchanged(
                role="assistant", content=content, tool_calls=tuple(c.to_chat() for c in calls)
            )
        )
        done = await asyncio.gather(*(self._one(c, decisions.get(i)) for i, c in enumerate(calls)))
        # stored in call order (as the model will read them), whatever finished first
        self.exchange.extend(x for _, x in done)
        return [r for r, _ in done]

    async def _approve(self, calls: Sequence[ToolCall]) -> dict[int, Decision]:
        """The decisions of the step's ``confirm`` calls, by position; raises
        ``ApprovalPending`` when one is still waiting."""
        if self.approvals is None:
            return {}
        approvals = self.approvals
        asks: list[tuple[int, ToolCall, ToolPolicy, dict[str, Any]]] = []
        for i, wired in enumerate(calls):
            admitted = self._admit(wired)
            if isinstance(admitted, _Admitted) and admitted.policy.confirm:
                asks.append((i, admitted.call, admitted.policy, admitted.arguments))
        if not asks:
            return {}
        found = await asyncio.gather(
            *(
                approvals.decide(
                    call,
                    arguments,
                    policy,
                    self.caller,
                    # who besides the asker may decide: the tool's entry + [approvers] for the
                    # chat or thread (a policy of its own, separate from who may run tools)
                    approvers=self.catalog.approvers_for(call.name, self.caller),
                )
                for _, call, policy, arguments in asks
            ),
            return_exceptions=True,
        )
        decisions: dict[int, Decision] = {}
        pending: ApprovalPending | None = None
        for (i, call, _, _), result in zip(asks, found, strict=True):
            if isinstance(result, ApprovalPending):
                pending = pending or result
            elif isinstance(result, BaseException):
                raise result
            else:
                log.info("tool_approval_decided", tool=call.name, decision=result)
                decisions[i] = result
        if pending is not None:
            self.parked = pending.approval_id
            raise pending
        return decisions

    async def _one(self, call: ToolCall, decision: Decision | None) -> tuple[ToolResult, Exchanged]:
        name = self._resolve(call.name)
        started = time.perf_counter()
        with tracing.span("tool.call", {"gen_ai.tool.name": name, "gen_ai.tool.call.id": call.id}):
            outcome, text = await self._execute(call, decision)
            tracing.annotate({"gateway.outcome": outcome, "gateway.decision": decision})
        elapsed = time.perf_counter() - started
        self.metrics.tool_calls.labels(name if name in self.offered else "other", outcome).inc()
        self.metrics.tool_seconds.labels(name if name in self.offered else "other").observe(
            elapsed, exemplar=tracing.exemplar()
        )
        log.info(
            "tool_called",
            tool=name,
            call_id=call.id,
            outcome=outcome,
            duration_ms=round(elapsed * 1000, 1),
            output_chars=len(text),
        )
        stored = Exchanged(
            role="tool",
            content=text,
            tool_call_id=call.id,
            tool_name=name,
            outcome=outcome,
            duration_ms=round(elapsed * 1000, 1),
        )
        return ToolResult(call_id=call.id, name=name, content=text, outcome=outcome), stored

    def _admit(self, wired: ToolCall) -> _Admitted | tuple[str, str]:
        """The call, its tool, policy and parsed arguments; or the outcome and text of a
        refusal (fail closed: offered this turn AND still allowed by policy for this
        caller)."""
        call = replace(wired, name=self._resolve(wired.name))
        reason = (
            "not offered in this turn"
            if call.name not in self.offered
            else self.catalog.check(call.name, self.caller)
        )
        tool = self.catalog.tool(call.name)
        policy = self.catalog.policy(call.name)
        if reason is not None or tool is None or policy is None:
            return "refused", f"error: the tool {call.name!r} is not available ({reason})"
        try:
            parsed = json.loads(call.arguments or "{}")
        except ValueError:
            return "error", "error: the arguments are not valid JSON"
        if not isinstance(parsed, dict):
            return "error", "error: the arguments must be a JSON object"
        return _Admitted(call=call, tool=tool, policy=policy, arguments=parsed)

    async def _execute(self, wired: ToolCall, decision: Decision | None) -> tuple[str, str]:
        admitted = self._admit(wired)
        if not isinstance(admitted, _Admitted):
            if admitted[0] == "refused":
                log.warning("tool_refused", tool=self._resolve(wired.name), reason=admitted[1])
            return admitted
        call, tool, policy, parsed = (
            admitted.call,
            admitted.tool,
            admitted.policy,
            admitted.arguments,
        )
        if policy.confirm:
            if self.approvals is None:
                return "not_approved", "not approved: approvals are not available here"
            if decision is None:  # never ran without its decision (fail closed)
                return "not_approved", "not approved: no decision was made"
            if decision != "approved":
                return "not_approved", f"not approved ({decision}): the tool did not run"
        timeout = policy.timeout_seconds or self.catalog.file.timeout_seconds
        limit = policy.max_output_chars or self.catalog.file.max_output_chars
        try:
            text = await asyncio.wait_for(tool.handler(parsed, self.caller), timeout)
        except TimeoutError:
            return "timeout", f"error: the tool did not answer within {timeout:g} seconds"
        except (ToolInputError, ToolFailed) as exc:
            return "error", f"error: {exc}"
        except Exception as exc:  # noqa: BLE001 - a tool is third-party code (MCP, plugins):
            # its failure is the model's information, never a failed turn
            log.warning("tool_crashed", tool=call.name, error=repr(exc))
            return "error", f"error: the tool failed ({type(exc).__name__})"
        return "ok", cap_output(text, limit)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Admitted:
    call: ToolCall
    tool: Tool
    policy: ToolPolicy
    arguments: dict[str, Any]
