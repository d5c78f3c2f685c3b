"""The budget check, as a pure function of what the ledger says (``BudgetState``).

A limit is over when what was spent in its period, plus what the turns running right now in
its scope reserved, reached it. A running turn reserves what an answer cost on average in
that scope this period (its own cost is not guessed in advance), so the answer that crosses a
limit is the last one; replicas that pass the check at the same moment overshoot by at most
the turns running then (each one answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.usage.config import Budgets, Limit
from session_store.repos.usage import BudgetState


@dataclass(frozen=True, slots=True, kw_only=True)
class Periods:
    day_start: datetime
    next_day: datetime
    month_start: datetime
    next_month: datetime


def periods(now: datetime) -> Periods:
    """Days and months in UTC."""
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return Periods(
        day_start=day, next_day=day + timedelta(days=1), month_start=month, next_month=next_month
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    #: the limit's name in ``[budgets]`` (``person_per_day``, ``places."slack:*:C1"``, ...)
    limit: str
    #: the metric label: person_per_day, place_per_month, place, total_per_month
    label: str
    amount: str
    period_start: datetime
    resets_at: datetime

    @property
    def notice(self) -> str:
        when = self.resets_at.strftime("%Y-%m-%d %H:%M UTC")
        return (
            f"The usage limit {self.limit} ({self.amount}) is reached, so I can't answer "
            f"for now. It resets at {when}."
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Scope:
    limit: str
    label: str
    budget: Limit
    cost: Decimal
    tokens: int
    answers: int
    running: int
    period_start: datetime
    resets_at: datetime

    def over(self) -> str | None:
        """The amount of the limit reached, or None."""
        answers = max(self.answers, 1)
        if self.budget.cost is not None:
            reserved = self.running * self.cost / answers if self.answers else Decimal(0)
            if self.cost + reserved >= self.budget.cost:
                return f"{self.budget.cost:f}"
        if self.budget.tokens is not None:
            reserved_tokens = self.running * self.tokens // answers if self.answers else 0
            if self.tokens + reserved_tokens >= self.budget.tokens:
                return f"{self.budget.tokens} tokens"
        return None


def check(budgets: Budgets, state: BudgetState, *, place: str, now: datetime) -> Refusal | None:
    """The first limit over, or None (every budget that applies is checked)."""
    for scope in _scopes(budgets, state, place=place, now=now):
        if not scope.budget.is_set:
            continue
        amount = scope.over()
        if amount is not None:
            return Refusal(
                limit=scope.limit,
                label=scope.label,
                amount=amount,
                period_start=scope.period_start,
                resets_at=scope.resets_at,
            )
    return None


def _scopes(budgets: Budgets, s: BudgetState, *, place: str, now: datetime) -> list[_Scope]:
    p = periods(now)
    place_limit_name, place_limit = budgets.for_place(place)
    month = {"period_start": p.month_start, "resets_at": p.next_month}
    return [
        _Scope(
            limit="person_per_day",
            label="person_per_day",
            budget=budgets.person_per_day,
            cost=s.person_day_cost,
            tokens=s.person_day_tokens,
            answers=s.person_day_answers,
            running=s.person_running,
            period_start=p.day_start,
            resets_at=p.next_day,
        ),
        _Scope(
            limit=place_limit_name,
            label="place_per_month" if place_limit_name == "place_per_month" else "place",
            budget=place_limit,
            cost=s.place_month_cost,
            tokens=s.place_month_tokens,
            answers=s.place_month_answers,
            running=s.place_running,
            **month,
        ),
        _Scope(
            limit="total_per_month",
            label="total_per_month",
            budget=budgets.total_per_month,
            cost=s.total_month_cost,
            tokens=s.total_month_tokens,
            answers=s.total_month_answers,
            running=s.total_running,
            **month,
        ),
    ]
