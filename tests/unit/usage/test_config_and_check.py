"""``[prices]`` and ``[budgets]`` parsing, and the budget check as a pure function."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.core.config_file import parse_config_text
from gateway.core.errors import ConfigError
from gateway.usage.budgets import check, periods
from gateway.usage.config import UsageConfig, usage_config
from session_store.repos.usage import BudgetState

NOW = datetime(2026, 12, 3, 15, 30, tzinfo=UTC)
ZERO = BudgetState(
    person_id=7,
    person_day_cost=Decimal(0),
    person_day_tokens=0,
    person_day_answers=0,
    person_month_cost=Decimal(0),
    person_month_tokens=0,
    place_month_cost=Decimal(0),
    place_month_tokens=0,
    place_month_answers=0,
    total_month_cost=Decimal(0),
    total_month_tokens=0,
    total_month_answers=0,
    person_running=0,
    place_running=0,
    total_running=0,
)


def config(text: str) -> UsageConfig:
    return usage_config(parse_config_text(text))


def test_prices_cost_per_million_and_a_new_digest_per_change() -> None:
    one = config('[prices."m"]\ninput = 0.15\noutput = 0.60\n').prices
    assert one.cost("m", 1_000_000, 500_000) == Decimal("0.45")
    assert one.cost("unpriced", 10, 10) is None
    other = config('[prices."m"]\ninput = 0.15\noutput = 0.61\n').prices
    assert one.digest != other.digest


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ('[prices."m"]\ninput = 1\n', '[prices."m"].output'),
        ('[prices."m"]\ninput = "x"\noutput = 1\n', '[prices."m"].input'),
        ("[budgets]\nperson_per_week = 1\n", "[budgets].person_per_week"),
        ("[budgets]\ntotal_per_month = -1\n", "[budgets].total_per_month"),
        ("[budgets]\nperson_tokens_per_day = 1.5\n", "[budgets].person_tokens_per_day"),
        ('[budgets.places."slack"]\nper_month = 1\n', '[budgets.places."slack"]'),
        ('[budgets.places."a:b:c"]\nper_day = 1\n', '[budgets.places."a:b:c"].per_day'),
    ],
)
def test_a_bad_entry_is_named(text: str, entry: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(text)
    assert entry in str(caught.value) and "GATEWAY_CONFIG_FILE" in str(caught.value)


def test_the_most_specific_place_limit_wins() -> None:
    budgets = config(
        '[budgets]\nplace_per_month = 5\n[budgets.places."slack:*:*"]\nper_month = 2\n'
        '[budgets.places."slack:*:C1"]\nper_month = 1\n'
    ).budgets
    assert budgets.for_place("slack:T1:C1")[0] == 'places."slack:*:C1"'
    assert budgets.for_place("slack:T1:C2")[0] == 'places."slack:*:*"'
    assert budgets.for_place("web:local:general")[0] == "place_per_month"


def test_periods_and_resets_are_utc_days_and_months() -> None:
    p = periods(NOW)
    assert p.day_start == datetime(2026, 12, 3, tzinfo=UTC)
    assert p.next_day == datetime(2026, 12, 4, tzinfo=UTC)
    assert p.next_month == datetime(2027, 1, 1, tzinfo=UTC)


def test_running_turns_reserve_an_average_answer() -> None:
    budgets = config("[budgets]\nperson_per_day = 0.010\n").budgets
    spent = replace(ZERO, person_day_cost=Decimal("0.006"), person_day_answers=3)
    assert check(budgets, spent, place="a:b:c", now=NOW) is None
    # two turns of this person running elsewhere: 0.006 + 2 x 0.002 reaches 0.010
    running = replace(spent, person_running=2)
    refusal = check(budgets, running, place="a:b:c", now=NOW)
    assert refusal is not None and refusal.limit == "person_per_day"
    assert "resets at 2026-12-04 00:00 UTC" in refusal.notice


def test_tokens_limit_and_no_limit() -> None:
    budgets = config("[budgets]\ntotal_tokens_per_month = 100\n").budgets
    assert check(budgets, replace(ZERO, total_month_tokens=99), place="a:b:c", now=NOW) is None
    over = check(budgets, replace(ZERO, total_month_tokens=100), place="a:b:c", now=NOW)
    assert over is not None and over.label == "total_per_month" and "100 tokens" in over.notice
    assert not config("").budgets.any
