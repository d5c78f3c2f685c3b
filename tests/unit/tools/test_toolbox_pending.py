"""A step with a pending approval runs none of its calls (parked turns): every
request of the step is asked for at once, and the toolbox remembers what it parked on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from gateway.agents.base import ToolCall
from gateway.core.metrics import Metrics
from gateway.tools.catalog import (
    Tool,
    ToolCaller,
    ToolPolicy,
    ToolPolicyCatalog,
    ToolSpec,
    parse_tools_file,
)
from gateway.tools.runner import ApprovalPending, Decision, TurnToolbox

FILE = """
[tools."ops.restart"]
domains = ["ops"]
operation = "write"
risk = "medium"
confirm = true

[tools."ops.drain"]
domains = ["ops"]
operation = "write"
risk = "medium"
confirm = true

[tools."ops.status"]
domains = ["ops"]
operation = "read"
risk = "low"
"""


class Asked:
    """Approvals that decide ``ops.drain`` at once and leave ``ops.restart`` pending."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def decide(
        self,
        call: ToolCall,
        arguments: Mapping[str, Any],
        policy: ToolPolicy,
        caller: ToolCaller,
        *,
        approvers: tuple[str, ...] = (),
    ) -> Decision:
        self.asked.append(policy.name)
        if policy.name == "ops.restart":
            raise ApprovalPending("apv-1")
        return "approved"


def toolbox(ran: list[str], approvals: Asked) -> TurnToolbox:
    def make(name: str) -> Tool:
        async def handler(args: Mapping[str, Any], caller: ToolCaller) -> str:
            ran.append(name)
            return "ok"

        spec = ToolSpec(name=name, description=name, parameters={"type": "object"}, source="t")
        return Tool(spec=spec, handler=handler)

    names = ["ops.restart", "ops.drain", "ops.status"]
    catalog = ToolPolicyCatalog(
        [make(n) for n in names], defaults={}, tools_file=parse_tools_file(FILE)
    )
    caller = ToolCaller(
        session_id=1, platform="web", scope="local", chat_id="c", thread_id="t", user_id="ann"
    )
    return TurnToolbox(
        catalog=catalog,
        caller=caller,
        offered=frozenset(names),
        metrics=Metrics(),
        max_steps=4,
        approvals=approvals,
    )


async def test_a_pending_approval_stops_the_whole_step_and_is_remembered() -> None:
    ran: list[str] = []
    approvals = Asked()
    box = toolbox(ran, approvals)
    calls = [
        ToolCall(id="1", name="ops__status", arguments="{}"),
        ToolCall(id="2", name="ops__restart", arguments="{}"),
        ToolCall(id="3", name="ops__drain", arguments="{}"),
    ]
    with pytest.raises(ApprovalPending) as raised:
        await box.run(calls)
    assert raised.value.approval_id == "apv-1" and box.parked == "apv-1"
    assert sorted(approvals.asked) == ["ops.drain", "ops.restart"]  # both cards at once
    assert ran == [] and box.exchange == []  # nothing of the step ran or was recorded


async def test_a_step_whose_approvals_are_decided_runs_once_each() -> None:
    ran: list[str] = []
    box = toolbox(ran, Asked())
    results = await box.run(
        [
            ToolCall(id="1", name="ops__status", arguments="{}"),
            ToolCall(id="3", name="ops__drain", arguments="{}"),
        ]
    )
    assert sorted(ran) == ["ops.drain", "ops.status"] and box.parked is None
    assert [r.outcome for r in results] == ["ok", "ok"]
