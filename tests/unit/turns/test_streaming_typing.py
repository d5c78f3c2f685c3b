"""The streaming and typing stages around the agent call, on a fake turn and fake parts."""

from __future__ import annotations

from typing import cast

from gateway.agents.base import Agent
from gateway.core.domain import ReplyTarget
from gateway.core.ports import PaceRule, Transport
from gateway.outbox.pacing import Rules
from gateway.turns.stages.streaming import OpenStream, StreamingStage
from gateway.turns.stages.typing import TypingStage
from tests.unit.turns.fakes import fake_turn, message, target
from testsupport.harness import wait_for


class Stream:
    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self.closed = False
        self.texts: list[str] = []

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def restart(self) -> None:
        self.texts.clear()

    def status(self, line: str) -> None:
        pass

    @property
    def previews_after(self) -> int | None:
        return 4 if self.shown else None

    @property
    def written(self) -> str:
        return "".join(self.texts)

    async def close(self) -> None:
        self.closed = True

    async def discard(self) -> None:
        self.shown = False


class Streams:
    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream
        self.opened: list[tuple[int, int, ReplyTarget]] = []

    async def open(
        self, agent: Agent, *, session_id: int, after_seq: int, target: ReplyTarget
    ) -> OpenStream | None:
        self.opened.append((session_id, after_seq, target))
        return self.stream


AGENT = cast(Agent, object())


async def test_a_streamed_turn_gives_the_agent_its_stream_and_binds_the_previews() -> None:
    stream = Stream(shown=True)
    streams = Streams(stream)
    stage = StreamingStage(streams, AGENT)
    turn = fake_turn(message(5, "hi", thread="t9"), done_seq=4)
    assert await stage.before(turn) is None
    assert streams.opened == [(1, 4, target("t9"))] and turn.request.stream is stream
    await stage.close(turn)
    assert stream.closed and turn.previews_after == 4


async def test_a_turn_that_does_not_stream_binds_nothing() -> None:
    stage = StreamingStage(Streams(None), AGENT)
    turn = fake_turn(message(1, "hi"))
    await stage.before(turn)
    await stage.close(turn)
    assert turn.request.stream is None and turn.previews_after is None


class Typing:
    """A transport's typing calls (the ones ``hold_typing`` makes)."""

    platform = "web"
    typing_interval = 0.01

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pace(self, target: ReplyTarget) -> list[PaceRule]:
        return [PaceRule(f"chat:{target.chat_id}", 0.01)]

    async def typing(self, target: ReplyTarget) -> None:
        self.calls.append(f"typing {target.thread_id}")

    async def clear_typing(self, target: ReplyTarget) -> None:
        self.calls.append(f"clear {target.thread_id}")


class Budget:
    def __init__(self) -> None:
        self.reserved = 0

    async def __call__(self, rules: Rules, max_wait: float) -> float:
        self.reserved += 1
        return 0.0


def typing_stage(transport: Typing, budget: Budget, delay: float) -> TypingStage:
    transports = {"web": cast(Transport, transport)}
    return TypingStage(transports, budget=budget, delay=delay)


async def test_a_slow_call_shows_typing_in_its_thread_until_it_ends() -> None:
    transport, budget = Typing(), Budget()
    turn = fake_turn(message(1, "hi", thread="t3"))
    async with typing_stage(transport, budget, 0.0).around(turn):
        await wait_for(lambda: transport.calls.count("typing t3") >= 2, timeout=5)
    assert transport.calls[-1] == "clear t3"
    assert budget.reserved == 0  # not streamed: renewals do not share the preview budget


async def test_a_streamed_turns_renewals_draw_on_the_chats_budget() -> None:
    transport, budget = Typing(), Budget()
    turn = fake_turn(message(1, "hi"))
    turn.request.stream = Stream(shown=False)
    async with typing_stage(transport, budget, 0.0).around(turn):
        await wait_for(lambda: transport.calls.count("typing t1") >= 3, timeout=5)
    # the first indicator never waits for the budget; each renewal reserves
    assert budget.reserved >= 2


async def test_a_quick_call_shows_no_indicator() -> None:
    transport = Typing()
    async with typing_stage(transport, Budget(), 60.0).around(fake_turn(message(1, "hi"))):
        pass
    assert transport.calls == []
