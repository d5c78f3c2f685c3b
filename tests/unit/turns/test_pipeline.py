"""The pipeline runs its stages around the agent call, on fake turns (no database).

A new capability is one more stage in the list: ``Allowance`` below is written against the
stage interface alone and inserted into the list, nothing else changes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager

import pytest

from gateway.agents.base import Turn
from gateway.core.domain import Reply
from gateway.core.errors import AgentError
from gateway.tools.runner import ApprovalPending
from gateway.turns.context import ContextPolicy
from gateway.turns.pipeline import Pipeline
from gateway.turns.stage import APOLOGY, Answer, Slot, Stage, TurnRun
from gateway.turns.stages.commands import CommandsStage
from tests.unit.turns.fakes import fake_turn, message, texts
from tests.unit.turns.test_commands import HELP, Choices


class Agent:
    """Answers every request with its last new message, and remembers the requests."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.requests: list[Turn] = []
        self.fail = fail

    async def __call__(self, request: Turn) -> Sequence[Reply] | None:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        return [Reply(text=f"echo: {request.new_messages[-1].content}", tokens_used=7)]


_SPENT: Slot[int] = Slot("allowance")


class Allowance(Stage):
    """What a budget stage looks like: refuses before any cost, charges after the answer."""

    name = "allowance"

    def __init__(self, left: int) -> None:
        self.left = left

    async def before(self, turn: TurnRun) -> Answer | None:
        if self.left <= 0:
            return Answer(outcome="refused", replies=[Reply(text="Your allowance is spent.")])
        turn.request.sections.append(f"Answer in at most {self.left} tokens.")
        turn.put(_SPENT, 0)
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        self.left -= sum(r.tokens_used or 0 for r in replies)
        return replies


def stages(*extra: Stage) -> list[Stage]:
    return [CommandsStage(Choices(), ContextPolicy()), *extra]


async def test_an_inserted_stage_adds_to_the_request_and_charges_the_answer() -> None:
    allowance, agent = Allowance(10), Agent()
    turn = fake_turn(message(1, "/help", command="help"), message(2, "hello"))
    assert await Pipeline(stages(allowance)).run(turn, agent) == "answered"
    (request,) = agent.requests
    assert request.system_prompt.endswith("\n\nAnswer in at most 10 tokens.")
    assert [m.content for m in request.new_messages] == ["hello"]
    assert texts(turn) == [HELP, "echo: hello"]  # the command's answer comes first
    assert allowance.left == 3


async def test_a_stage_that_refuses_skips_the_later_stages_and_the_agent() -> None:
    later, agent = Recorder("later", []), Agent()
    turn = fake_turn(message(1, "hello"))
    assert await Pipeline(stages(Allowance(0), later)).run(turn, agent) == "refused"
    assert agent.requests == [] and later.log == []
    assert texts(turn) == ["Your allowance is spent."]


async def test_a_commands_only_turn_never_reaches_the_other_stages() -> None:
    later, agent = Recorder("later", []), Agent()
    turn = fake_turn(message(1, "/help", command="help"))
    assert await Pipeline(stages(later)).run(turn, agent) == "command_help"
    assert agent.requests == [] and later.log == [] and texts(turn) == [HELP]


class Recorder(Stage):
    def __init__(self, name: str, log: list[str]) -> None:
        self.label = name
        self.log = log

    async def before(self, turn: TurnRun) -> Answer | None:
        self.log.append(f"before {self.label}")
        return None

    def around(self, turn: TurnRun) -> AbstractAsyncContextManager[None]:
        return self._around()

    @contextlib.asynccontextmanager
    async def _around(self) -> AsyncIterator[None]:
        self.log.append(f"enter {self.label}")
        yield
        self.log.append(f"leave {self.label}")

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        self.log.append(f"after {self.label}")
        return [Reply(text=f"{r.text} {self.label}") for r in replies]

    async def close(self, turn: TurnRun) -> None:
        self.log.append(f"close {self.label}")


async def test_hooks_run_in_order_around_the_call_and_after_it_in_reverse() -> None:
    log: list[str] = []
    turn = fake_turn(message(1, "hi"))
    pipeline = Pipeline([Recorder("a", log), Recorder("b", log)])
    assert await pipeline.run(turn, Agent()) == "answered"
    assert log == [
        "before a",
        "before b",
        "enter a",
        "enter b",
        "leave b",
        "leave a",
        "after b",
        "after a",
        "close b",
        "close a",
    ]
    # the stage nearest the agent sees its answer first
    assert texts(turn) == ["echo: hi b a"]


async def test_a_failing_agent_is_an_apology_and_no_stage_records_it() -> None:
    log: list[str] = []
    turn = fake_turn(message(1, "hi"))
    turn.request.model = "small"
    outcome = await Pipeline([Recorder("a", log)]).run(turn, Agent(AgentError("upstream 500")))
    assert outcome == "agent_failed"
    (reply,) = turn.replies
    assert reply.text == APOLOGY
    assert reply.metadata["error"] == "upstream 500" and reply.metadata["agent_model"] == "small"
    assert "after a" not in log and log[-1] == "close a"


async def test_a_crashing_agent_is_an_apology_too() -> None:
    turn = fake_turn(message(1, "hi"))
    assert await Pipeline([]).run(turn, Agent(ValueError("bad"))) == "agent_failed"
    assert turn.replies[0].metadata["error"] == "ValueError: bad"


async def test_an_interrupted_call_ends_the_run_without_an_answer() -> None:
    log: list[str] = []

    async def interrupted(request: Turn) -> Sequence[Reply] | None:
        return None

    turn = fake_turn(message(1, "hi"))
    assert await Pipeline([Recorder("a", log)]).run(turn, interrupted) is None
    assert turn.replies == [] and "after a" not in log and log[-1] == "close a"


class Holds(Stage):
    """A stage whose turn waits for an approval once the agent is done."""

    async def before(self, turn: TurnRun) -> Answer | None:
        turn.hold_when(lambda: "apv-1")
        return None


@pytest.mark.parametrize("fail", [None, ApprovalPending("apv-1"), AgentError("swallowed")])
async def test_a_held_turn_parks_however_the_agent_ended(fail: Exception | None) -> None:
    log: list[str] = []
    turn = fake_turn(message(1, "hi"))
    with pytest.raises(ApprovalPending) as raised:
        await Pipeline([Recorder("a", log), Holds()]).run(turn, Agent(fail))
    assert raised.value.approval_id == "apv-1"
    assert turn.replies == [] and "after a" not in log and log[-1] == "close a"
