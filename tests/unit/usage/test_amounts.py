"""Sums of money are shown in the digits they need: a limit of 0.00005 reads 0.00005 in
``gateway usage`` and ``/usage``, never 0.00, and a tiny spend is not rounded to nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gateway.usage.commands import limit_text
from gateway.usage.config import Limit
from gateway.usage.report import Report, amount, render_text
from session_store.repos.usage import UsageRow


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "-"),
        (Decimal(0), "0.00"),
        (Decimal("5"), "5.00"),
        (Decimal("0.15"), "0.15"),
        (Decimal("0.00005"), "0.00005"),
        (0.00005, "0.00005"),
        (Decimal("1.2345"), "1.2345"),
        (Decimal("0.123456789"), "0.123457"),
        (Decimal("0.000000123456"), "0.000000123"),
        (Decimal("500.00"), "500.00"),
        (Decimal("1E+2"), "100.00"),
    ],
)
def test_amounts_keep_their_digits(value: Decimal | float | None, shown: str) -> None:
    assert amount(value) == shown


def test_a_small_limit_and_a_small_spend_are_not_rounded_away() -> None:
    report = Report(
        by="model",
        since=datetime(2026, 12, 1, tzinfo=UTC),
        until=datetime(2026, 12, 2, tzinfo=UTC),
        rows=[
            UsageRow(
                key="gpt-4o-mini",
                cost=Decimal("0.0000123"),
                prompt_tokens=40,
                completion_tokens=10,
                calls=1,
                accounts=(),
            )
        ],
        budgets=[
            {
                "limit": "person_per_day",
                "per": "today",
                "cost": 0.00005,
                "tokens": None,
                "spent_cost": 0.0000123,
                "spent_tokens": 50,
                "left_cost": 0.0000377,
            }
        ],
    )
    text = render_text(report)
    assert "0.00005 (today)" in text, text
    assert "spent 0.0000123 / 50 tokens, left 0.0000377" in text, text
    assert "gpt-4o-mini  0.0000123" in text, text
    assert "0.00 " not in text and "0.0000 " not in text, text
    assert limit_text(Limit(cost=Decimal("0.00005"))) == "0.00005"
