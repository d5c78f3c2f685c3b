"""The context stage sizes the prompt on a fake turn whose context came with the claim: the
real assembler, no store (one it reached for would fail the test)."""

from __future__ import annotations

from typing import cast

from gateway.agents.prompt import TokenCounter
from gateway.core.domain import Reply
from gateway.core.metrics import Metrics
from gateway.turns.context import ContextAssembler, ContextPolicy
from gateway.turns.stage import APOLOGY, TurnRun
from gateway.turns.stages.context import ContextStage
from gateway.turns.summaries import SummaryJob
from session_store.records import ContextRecord, PrefetchedContext, TurnState
from session_store.store import Store
from tests.unit.turns.fakes import fake_turn, message


class Summaries:
    def __init__(self) -> None:
        self.jobs: list[SummaryJob] = []

    def request(self, job: SummaryJob) -> None:
        self.jobs.append(job)


class Calibrated:
    name = "calibrated"
    calibrates = True

    async def respond(self, turn: object) -> list[Reply]:
        return []


def stage(
    policy: ContextPolicy, summaries: Summaries | None = None, counter: TokenCounter | None = None
) -> ContextStage:
    # no store: everything comes with the claim
    assembler = ContextAssembler(cast(Store, None), policy, counter or TokenCounter())
    return ContextStage(
        assembler, summaries=summaries or Summaries(), metrics=Metrics(), agent=Calibrated()
    )


def turn_with_history(history: list[str], *, limit: int = 64, model: str | None = None) -> TurnRun:
    """A question at seq len(history)+1 after ``history`` (alternating user, assistant)."""
    seq = len(history) + 1
    page = tuple(
        ContextRecord(
            id=n,
            seq_no=n,
            role="user" if n % 2 else "assistant",
            content=text,
            sender_id="ann" if n % 2 else None,
        )
        for n, text in reversed(list(enumerate([*history, "the question"], start=1)))
    )
    state = TurnState(
        session_metadata={"topic": "x"},
        title=None,
        selected_model=model,
        user_model=None,
        place={},
        summary=None,
    )
    prefetched = PrefetchedContext(
        question_seq=seq, upto_seq=seq, state=state, after_seq=0, limit=limit, page=page
    )
    return fake_turn(message(seq, "the question"), done_seq=seq - 1, context=prefetched)


async def test_the_request_gets_the_sized_context_and_the_session_model() -> None:
    policy = ContextPolicy(default_model="small", allowed_models=("small", "big"))
    turn = turn_with_history(["hi", "hello"], model="big")
    assert await stage(policy).before(turn) is None
    request = turn.request
    assert [m.content for m in request.context] == ["hi", "hello", "the question"]
    assert request.model == request.selected_model == "big"
    assert request.system_prompt.startswith(policy.system_prompt)
    assert request.prompt_budget == policy.prompt_budget("big")
    assert request.estimated_prompt_tokens is not None and 0 < request.room() < 8192
    assert request.session_metadata == {"topic": "x"}


async def test_room_reserved_by_an_earlier_stage_comes_out_of_the_budget() -> None:
    policy = ContextPolicy(default_model="small")
    plain, reserved = turn_with_history(["hi"]), turn_with_history(["hi"])
    reserved.request.reserved_tokens = 500
    await stage(policy).before(plain)
    await stage(policy).before(reserved)
    assert plain.request.prompt_budget is not None and reserved.request.prompt_budget is not None
    # calibrated: an uncalibrated estimate is scaled up, never down
    assert plain.request.prompt_budget - reserved.request.prompt_budget >= 500


async def test_a_window_too_small_for_the_system_prompt_is_an_apology() -> None:
    policy = ContextPolicy(default_model="tiny", window_overrides={"tiny": 1030})
    answer = await stage(policy).before(turn_with_history([]))
    assert answer is not None and answer.outcome == "agent_failed"
    (reply,) = answer.replies
    assert reply.text == APOLOGY and "too small" in str(reply.metadata["error"])


async def test_older_turns_left_out_ask_for_a_summary() -> None:
    summaries = Summaries()
    policy = ContextPolicy(default_model="small", window_overrides={"small": 1600})
    history = [f"message {n} " + "word " * 150 for n in range(1, 9)]
    # a full first page: the transcript goes on before it
    turn = turn_with_history(history, limit=9)
    assert await stage(policy, summaries).before(turn) is None
    (job,) = summaries.jobs
    assert job.session_id == 1 and job.upto_seq == 9 and job.model == "small"
    assert len(turn.request.context) < 9


async def test_after_the_answer_the_servers_count_calibrates_the_estimate() -> None:
    policy = ContextPolicy(default_model="small")
    counter = TokenCounter()
    context_stage = stage(policy, counter=counter)
    turn = turn_with_history(["hi"])
    await context_stage.before(turn)
    before = counter.factor("small")
    estimate = turn.request.estimated_prompt_tokens or 0
    reply = Reply(text="ok", metadata={"usage": {"prompt_tokens": estimate * 3}})
    assert await context_stage.after(turn, [reply]) == [reply]
    assert counter.factor("small") > before
