"""Usage: before the agent call, the model provider is told who asks (an opaque id of the
person); after it, every model call the agent reports becomes a usage charge, written to the
ledger by the turn's finish statement (no transaction of its own)."""

from __future__ import annotations

import structlog

from gateway.core.domain import Reply
from gateway.core.errors import StoreError
from gateway.turns.stage import Answer, Stage, TurnRun
from gateway.usage.service import UsageService, account_of, opaque_person_id

log = structlog.get_logger(__name__)


class UsageStage(Stage):
    name = "usage"

    def __init__(self, usage: UsageService, *, identify: bool = True) -> None:
        self._usage = usage
        #: look the person up for the provider (only for agents that send it on)
        self._identify = identify

    async def before(self, turn: TurnRun) -> Answer | None:
        if not self._identify:
            return None
        question = turn.question
        account = None if question is None else account_of(turn.claim.key, question)
        if account is not None:
            try:
                person = await self._usage.person_id(account)
            except StoreError as exc:
                # the id is a courtesy to the provider: the answer goes on without it
                log.warning("person_lookup_failed", error=str(exc))
            else:
                turn.request.user = opaque_person_id(person)
        return None

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        question = turn.question
        account = None if question is None else account_of(turn.claim.key, question)
        # the pipeline adds these replies after the ones the turn has already (commands)
        first = len(turn.replies) + 1
        turn.charges.extend(await self._usage.charges(replies, account, first=first))
        return replies
