"""Knowledge: files shared in the thread and passages for the question, with citations.

Before the agent: files shared with these messages go into the thread's knowledge base (a
bounded wait for them to be read); passages for the question, within what is left of the
prompt budget, become a section of the system prompt, and inline files become attachments.
After: the answer's citations are frozen (one numbering for the turn) and footnoted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from gateway.core.domain import Reply, ReplyTarget, SessionKey
from gateway.core.ports import Transport
from gateway.knowledge.citations import TurnKnowledge
from gateway.turns.stage import Answer, Slot, Stage, TurnRun
from session_store.records import MessageRecord

_FOUND: Slot[TurnKnowledge] = Slot("knowledge")


class TurnRetrieval(Protocol):
    """The knowledge base's one call per turn (``gateway.knowledge.service.Knowledge``)."""

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
    ) -> TurnKnowledge | None: ...


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
        found = await self._knowledge.prepare_turn(
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
        turn.put(_FOUND, found)
        turn.request.sections.append(found.prompt)
        turn.request.attachments = found.parts
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        found = turn.get(_FOUND)
        return replies if found is None else found.cite(replies)
