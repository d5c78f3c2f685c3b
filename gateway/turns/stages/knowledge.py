"""Knowledge: files shared in the thread and passages for the question, with citations.

Before the agent: files shared with these messages go into the thread's knowledge base (a
bounded wait for them to be read); passages for the question, within what is left of the
prompt budget, become a section of the system prompt, and inline files become attachments.
After: the answer's citations are frozen and footnoted. One numbering per answer
(``passage_numbers``): the passages given before the agent are ``[1]..[k]``, and every
``search_knowledge`` call during it numbers what it returns after them; ``[n]`` resolves to
the passage given under ``n``, a number never given is dropped, and only the passages cited
count as read (the access counter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from gateway.core.domain import Reply, ReplyTarget, SessionKey
from gateway.core.ports import Transport
from gateway.knowledge.citations import TurnKnowledge, cite_answer
from gateway.knowledge.numbering import PassageNumbers
from gateway.turns.stage import Answer, Slot, Stage, TurnRun
from session_store.records import MessageRecord
from session_store.repos.knowledge import PassageHit

_FOUND: Slot[TurnKnowledge] = Slot("knowledge")
_NUMBERS: Slot[PassageNumbers] = Slot("passage_numbers")


def passage_numbers(turn: TurnRun) -> PassageNumbers:
    """The turn's one numbering of passages (made by whichever stage asks first: the tools
    stage hands it to ``search_knowledge``, this stage starts it with the turn's passages)."""
    numbers = turn.get(_NUMBERS)
    if numbers is None:
        numbers = PassageNumbers()
        turn.put(_NUMBERS, numbers)
    return numbers


class TurnRetrieval(Protocol):
    """The knowledge base's part for turns (``gateway.knowledge.turn.TurnKnowledgeBuilder``)."""

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
    ) -> TurnKnowledge | None: ...

    def count_access(self, hits: Sequence[PassageHit]) -> None: ...


class KnowledgeStage(Stage):
    name = "knowledge"

    def __init__(
        self,
        knowledge: TurnRetrieval,
        transports: Mapping[str, Transport],
        *,
        wait_seconds: float,
    ) -> None:
        self._knowledge = knowledge
        self._transports = transports
        #: how long a turn waits for the files shared with it to be read
        self._wait_seconds = wait_seconds

    async def before(self, turn: TurnRun) -> Answer | None:
        question = turn.question
        assert question is not None  # the pipeline runs stages only while one is open
        key = turn.claim.key
        found = await self._knowledge.prepare(
            key,
            turn.target,
            question,
            turn.pending,
            transport=self._transports.get(key.platform),
            token_budget=turn.request.room(),
            wait_seconds=self._wait_seconds,
            bases=() if turn.profile is None else turn.profile.knowledge,
        )
        if found is None:
            return None
        # the prompt numbers them 1..k: they are the first the answer is given (tools
        # run only during the agent call, after this)
        passage_numbers(turn).number_all(found.passages)
        turn.put(_FOUND, found)
        turn.request.sections.append(found.prompt)
        # after any the images stage gave
        turn.request.attachments = (*turn.request.attachments, *found.parts)
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        found = turn.get(_FOUND)
        numbers = turn.get(_NUMBERS)
        if found is None and not numbers:
            return replies
        cited, used = cite_answer(
            replies,
            numbers if numbers is not None else PassageNumbers(),
            trace=found.trace if found is not None else None,
            notes=found.notes if found is not None else (),
        )
        self._knowledge.count_access(used)
        return cited
