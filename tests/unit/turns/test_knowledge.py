"""The knowledge stage adds passages to the prompt and freezes the answer's citations."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.core.domain import Reply, ReplyTarget, SessionKey
from gateway.knowledge.citations import TurnKnowledge
from gateway.turns.stages.knowledge import KnowledgeStage
from session_store.knowledge import PassageHit
from session_store.records import MessageRecord
from tests.unit.turns.fakes import fake_turn, message


def hit(n: int) -> PassageHit:
    return PassageHit(
        chunk_id=n,
        document_id=10 + n,
        document_name=f"doc{n}.pdf",
        kb_name="kb",
        ordinal=n,
        page=n,
        section="",
        content=f"passage {n}",
        score=1.0,
        lexical_rank=n,
        lexical_score=1.0,
        vector_rank=None,
        vector_score=None,
    )


class Retrieval:
    def __init__(self, found: TurnKnowledge | None) -> None:
        self.found = found
        self.asked: list[tuple[str, int, float, object]] = []

    async def prepare_turn(
        self,
        key: SessionKey,
        target: ReplyTarget,
        question: MessageRecord,
        pending: Sequence[MessageRecord],
        *,
        transport: object,
        token_budget: int,
        wait_seconds: float,
        bases: Sequence[str] = (),
    ) -> TurnKnowledge | None:
        self.asked.append((question.content, token_budget, wait_seconds, transport))
        return self.found


FOUND = TurnKnowledge(
    passages=(hit(1), hit(2)),
    prompt="Passages:\n[1] passage 1\n[2] passage 2",
    trace={"mode": "lexical"},
    parts=({"type": "text", "text": "inline file"},),
)


async def test_passages_fill_what_the_context_left_and_become_a_prompt_section() -> None:
    retrieval = Retrieval(FOUND)
    transport = object()
    stage = KnowledgeStage(retrieval, {"web": transport}, wait_seconds=15.0)  # type: ignore[dict-item]
    turn = fake_turn(message(1, "what does the manual say?"))
    turn.request.prompt_budget, turn.request.estimated_prompt_tokens = 5000, 1200
    assert await stage.before(turn) is None
    assert retrieval.asked == [("what does the manual say?", 3800, 15.0, transport)]
    turn.request.system_prompt = "base"
    built = turn.request.build(turn)
    assert built.system_prompt == "base\n\n" + FOUND.prompt
    assert list(built.attachments) == [{"type": "text", "text": "inline file"}]


async def test_the_answer_cites_the_passages_it_used() -> None:
    stage = KnowledgeStage(Retrieval(FOUND), {}, wait_seconds=1.0)
    turn = fake_turn(message(1, "q"))
    await stage.before(turn)
    (cited,) = await stage.after(turn, [Reply(text="It says so [2].")])
    assert cited.text.startswith("It says so [2].\n\nSources:\n[2] doc2.pdf")
    assert [c["ordinal"] for c in cited.metadata["citations"]] == [2]
    assert cited.metadata["retrieval_trace"] == {"mode": "lexical"}


async def test_nothing_found_leaves_the_request_and_the_answer_alone() -> None:
    stage = KnowledgeStage(Retrieval(None), {}, wait_seconds=1.0)
    turn = fake_turn(message(1, "q"))
    await stage.before(turn)
    assert turn.request.sections == [] and turn.request.attachments == ()
    reply = Reply(text="plain [1]")
    assert await stage.after(turn, [reply]) == [reply]
