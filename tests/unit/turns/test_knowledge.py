"""The knowledge stage adds passages to the prompt and freezes the answer's citations."""

from __future__ import annotations

import json
from collections.abc import Sequence

from gateway.core.domain import Reply, ReplyTarget, SessionKey
from gateway.knowledge.citations import TurnKnowledge
from gateway.tools.builtin import knowledge_result
from gateway.turns.stages.knowledge import KnowledgeStage, passage_numbers
from session_store.records import MessageRecord
from session_store.repos.knowledge import PassageHit
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
        self.counted: list[int] = []

    async def prepare(
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

    def count_access(self, hits: Sequence[PassageHit]) -> None:
        self.counted += [h.chunk_id for h in hits]


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


async def test_a_tool_search_continues_the_numbering_and_its_citation_resolves_to_it() -> None:
    """Passages given before the turn are [1], [2]; a search_knowledge call during the turn
    returns a known passage under its number and a new one as [3]: [3] in the answer is the
    tool's passage, not a pre-turn one, and only cited passages count as read."""
    retrieval = Retrieval(FOUND)
    stage = KnowledgeStage(retrieval, {}, wait_seconds=1.0)
    turn = fake_turn(message(1, "q"))
    numbers = passage_numbers(turn)  # the tools stage hands this to the tool's caller
    await stage.before(turn)
    shown = json.loads(knowledge_result([hit(2), hit(9)], numbers))
    assert [(p["n"], p["cite_as"], p["text"]) for p in shown] == [
        (2, "[2]", "passage 2"),
        (3, "[3]", "passage 9"),
    ]
    (cited,) = await stage.after(turn, [Reply(text="From the search [3], see also [1].")])
    got = {c["ordinal"]: (c["chunk_id"], c["passage"]) for c in cited.metadata["citations"]}
    assert got == {1: (1, "passage 1"), 3: (9, "passage 9")}
    assert cited.text.endswith("Sources:\n[1] doc1.pdf, p. 1\n[3] doc9.pdf, p. 9")
    assert sorted(retrieval.counted) == [1, 9]


async def test_an_invented_number_is_dropped_not_mapped_to_another_passage() -> None:
    retrieval = Retrieval(FOUND)
    stage = KnowledgeStage(retrieval, {}, wait_seconds=1.0)
    turn = fake_turn(message(1, "q"))
    await stage.before(turn)
    (cited,) = await stage.after(turn, [Reply(text="Per [7] and [2].")])
    assert [c["ordinal"] for c in cited.metadata["citations"]] == [2]
    assert "[7]" not in cited.text.split("Sources:")[1]
    assert retrieval.counted == [2]  # offered [1] was not cited: not counted


async def test_tool_passages_are_cited_when_nothing_was_found_before_the_turn() -> None:
    retrieval = Retrieval(None)
    stage = KnowledgeStage(retrieval, {}, wait_seconds=1.0)
    turn = fake_turn(message(1, "q"))
    numbers = passage_numbers(turn)
    await stage.before(turn)
    assert json.loads(knowledge_result([hit(5)], numbers))[0]["n"] == 1
    (cited,) = await stage.after(turn, [Reply(text="It is so [1]. Not [2].")])
    assert [c["chunk_id"] for c in cited.metadata["citations"]] == [5]
    assert "retrieval_trace" not in cited.metadata and retrieval.counted == [5]


def test_outside_a_turn_the_tool_result_carries_no_numbers() -> None:
    (row,) = json.loads(knowledge_result([hit(1)], None))
    assert "n" not in row and row["document"] == "doc1.pdf"
