"""Budgets: before the model is asked, every budget that applies is checked against the
usage ledger (``gateway.usage.budgets``). Over budget the question stays stored, the model
is not asked, and the asker gets a short notice in the thread they asked in: once per limit,
person (or place) and period in each thread, so a question in another thread (a new web chat
question is a thread of its own) gets its own notice, never silence. A ledger that
cannot be read fails closed: the model is not asked and the asker is told the assistant is
unavailable. After: nothing (the usage stage charges)."""

from __future__ import annotations

from datetime import UTC, datetime

import structlog

from gateway.core.domain import Reply
from gateway.core.errors import StoreError
from gateway.turns.stage import COMMAND_MODEL, Answer, Stage, TurnRun
from gateway.usage.budgets import check, periods
from gateway.usage.service import UsageService, account_of
from session_store.repos.usage import place_of

log = structlog.get_logger(__name__)

UNAVAILABLE = "The assistant is unavailable just now. Please try again later."


class BudgetStage(Stage):
    name = "budget"

    def __init__(self, usage: UsageService) -> None:
        self._usage = usage

    async def before(self, turn: TurnRun) -> Answer | None:
        question = turn.question
        if question is None or not self._usage.config.budgets.any:
            return None
        key = turn.claim.key
        account = account_of(key, question)
        place = place_of(key)
        now = datetime.now(UTC)
        p = periods(now)
        try:
            state = await self._usage.store.usage.budget_state(
                account=account,
                place=place,
                day_start=p.day_start,
                month_start=p.month_start,
                session_id=turn.claim.session_id,
            )
        except StoreError as exc:
            # fail closed: no spend we cannot see
            log.warning("budget_unreadable", error=str(exc))
            self._usage.metrics.budget_refusals.labels("unavailable").inc()
            return Answer(
                outcome="budget_unavailable", replies=[Reply(text=UNAVAILABLE, model=COMMAND_MODEL)]
            )
        refusal = check(self._usage.config.budgets, state, place=place, now=now)
        if refusal is None:
            return None
        self._usage.metrics.budget_refusals.labels(refusal.label).inc()
        subject = f"person:{state.person_id}" if state.person_id is not None else account or "-"
        # the notice is per thread: the place the question was asked in, thread included
        where = place if key.thread_id is None else f"{place}:{key.thread_id}"
        first = await self._usage.store.usage.notice_once(
            limit=refusal.limit, subject=subject, place=where, period_start=refusal.period_start
        )
        log.info("budget_refused", limit=refusal.limit, noticed=first)
        replies = [Reply(text=refusal.notice, model=COMMAND_MODEL)] if first else []
        return Answer(outcome="over_budget", replies=replies)
