"""``/usage``: the asker's own spend and tokens today and this month, and their limits."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from gateway.core.domain import Reply
from gateway.turns.stage import COMMAND_MODEL, TurnRun
from gateway.usage.budgets import periods
from gateway.usage.config import Limit
from gateway.usage.report import amount
from gateway.usage.service import UsageService, account_of
from session_store.records import MessageRecord
from session_store.repos.usage import place_of


def money(value: Decimal | None) -> str:
    return amount(value)


def limit_text(limit: Limit) -> str:
    parts = []
    if limit.cost is not None:
        parts.append(amount(limit.cost))
    if limit.tokens is not None:
        parts.append(f"{limit.tokens} tokens")
    return " / ".join(parts) if parts else "no limit"


class UsageCommand:
    name = "usage"

    def __init__(self, usage: UsageService) -> None:
        self._usage = usage

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        key = turn.claim.key
        p = periods(datetime.now(UTC))
        state = await self._usage.store.usage.budget_state(
            account=account_of(key, ask),
            place=place_of(key),
            day_start=p.day_start,
            month_start=p.month_start,
            session_id=turn.claim.session_id,
        )
        budgets = self._usage.config.budgets
        place_name, place_limit = budgets.for_place(place_of(key))
        lines = [
            f"Today: {money(state.person_day_cost)} spent, {state.person_day_tokens} tokens.",
            f"This month: {money(state.person_month_cost)} spent, "
            f"{state.person_month_tokens} tokens.",
            f"Your daily limit: {limit_text(budgets.person_per_day)} "
            f"(resets {p.next_day:%Y-%m-%d %H:%M} UTC).",
            f"This place's monthly limit ({place_name}): {limit_text(place_limit)}; "
            f"used {money(state.place_month_cost)}, {state.place_month_tokens} tokens.",
        ]
        return Reply(text="\n".join(lines), model=COMMAND_MODEL)
