"""The tools stage offers the routed bundle, records the exchange and holds a turn that waits
for an approval; a real catalog and toolbox, no database."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.agents.base import ToolCall
from gateway.core.domain import Reply
from gateway.core.metrics import Metrics
from gateway.tools.catalog import Tool, ToolCaller, ToolPolicyCatalog, ToolSpec, parse_tools_file
from gateway.tools.routing import Bundle, RoutingDecision
from gateway.tools.runner import TurnToolbox
from gateway.tools.service import Prepared
from gateway.turns.stages.tools import ToolsStage, offers_tools
from tests.unit.turns.fakes import fake_turn, message

FILE = """
[tools."ops.status"]
domains = ["ops"]
operation = "read"
risk = "low"
"""
DECISION = RoutingDecision(domains=("ops",), confidence=0.9, phase="lookup", matched=("status",))
SCHEMA = {"type": "function", "function": {"name": "ops__status"}}


class Routing:
    """Offers ``ops.status`` (or nothing) and remembers what it was asked; never asks the
    model (keywords alone)."""

    async def ask_families(
        self,
        decision: RoutingDecision,
        caller: ToolCaller,
        text: str,
        *,
        models: Sequence[str],
        place: str,
    ) -> tuple[str, ...] | None:
        return None

    def __init__(self, *, offer: bool = True) -> None:
        self.offer = offer
        self.asked: list[tuple[ToolCaller, str]] = []

    def prepare(
        self,
        caller: ToolCaller,
        text: str,
        *,
        count: Callable[[str], int],
        max_tokens: int | None = None,
        asked: Sequence[str] | None = None,
    ) -> Prepared:
        self.asked.append((caller, text))
        if not self.offer:
            bundle = Bundle(decision=DECISION, names=(), schemas=(), schema_tokens=0)
            return Prepared(bundle=bundle, toolbox=None)

        async def status(args: Mapping[str, Any], who: ToolCaller) -> str:
            return "all green"

        spec = ToolSpec(name="ops.status", description="", parameters={}, source="t")
        catalog = ToolPolicyCatalog(
            [Tool(spec=spec, handler=status)], defaults={}, tools_file=parse_tools_file(FILE)
        )
        toolbox = TurnToolbox(
            catalog=catalog,
            caller=caller,
            offered=frozenset({"ops.status"}),
            metrics=Metrics(),
            max_steps=4,
        )
        bundle = Bundle(
            decision=DECISION,
            names=("ops.status",),
            schemas=(SCHEMA,),
            schema_tokens=count("x" * 40),
        )
        return Prepared(bundle=bundle, toolbox=toolbox)


async def test_the_bundle_is_offered_and_its_schemas_are_reserved() -> None:
    routing = Routing()
    turn = fake_turn(
        message(1, "/help", command="help"), message(2, "status of ops?", sender_id="bob")
    )
    turn.questions = [turn.asks[-1]]  # the commands stage took /help
    assert await ToolsStage(routing, count=len).before(turn) is None
    ((caller, asked),) = routing.asked
    assert asked == "status of ops?"  # commands are not routed
    assert (caller.user_id, caller.turn_seq, caller.thread_id) == ("bob", 2, "t1")
    assert turn.request.reserved_tokens == 40
    assert list(turn.request.tools) == [SCHEMA] and turn.request.toolbox is not None
    assert turn.held_by() is None


async def test_the_exchange_goes_before_the_answer_and_the_answer_records_the_routing() -> None:
    turn = fake_turn(message(1, "status of ops?"))
    stage = ToolsStage(Routing(), count=len)
    await stage.before(turn)
    assert isinstance(turn.request.toolbox, TurnToolbox)
    await turn.request.toolbox.run([ToolCall(id="c1", name="ops__status", arguments="{}")])
    call, result, answer = await stage.after(turn, [Reply(text="All green.")])
    assert call.exchange_role == "assistant" and call.metadata["tool_calls"]
    assert result.exchange_role == "tool" and result.text == "all green"
    assert result.metadata["tool_name"] == "ops.status" and result.model == "tool"
    assert answer.text == "All green."
    assert answer.metadata["offered_tools"] == ["ops.status"]
    assert answer.metadata["routing"] == DECISION.to_json()


async def test_a_toolbox_parked_on_an_approval_holds_the_turn() -> None:
    turn = fake_turn(message(1, "restart ops"))
    await ToolsStage(Routing(), count=len).before(turn)
    assert isinstance(turn.request.toolbox, TurnToolbox)
    turn.request.toolbox.parked = "apv-9"
    assert turn.held_by() == "apv-9"


async def test_nothing_routed_offers_no_toolbox_but_records_the_decision() -> None:
    turn = fake_turn(message(1, "hello"))
    stage = ToolsStage(Routing(offer=False), count=len)
    await stage.before(turn)
    assert turn.request.toolbox is None and turn.request.tools == ()
    (answer,) = await stage.after(turn, [Reply(text="hi")])
    assert answer.metadata["offered_tools"] == []


class NoTools:
    name = "plain"
    uses_tools = False

    async def respond(self, turn: object) -> list[Reply]:
        return []


def test_an_agent_that_calls_no_tools_gets_no_tools_stage() -> None:
    assert not offers_tools(NoTools())
    assert offers_tools(object())  # type: ignore[arg-type]
