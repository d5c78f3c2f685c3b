"""The figures ``gateway usage``, ``GET /api/v1/usage`` and ``/ops/usage`` show: the ledger
grouped by person, place, model or day, and each budget with what is left of it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, get_args

from gateway.usage.budgets import periods
from gateway.usage.config import Budgets, Limit, place_matches
from session_store.repos.usage import ReportBy, UsageRow
from session_store.store import Store

BY: tuple[str, ...] = get_args(ReportBy)


class BadRange(ValueError):
    """A ``--since``/``--until`` (or ``since``/``until``) that is not a date."""


def parse_day(text: str | None, *, default: datetime, end: bool = False) -> datetime:
    """``YYYY-MM-DD`` (UTC) to the start of that day; ``end``: the start of the next day."""
    if not text:
        return default
    try:
        day = date.fromisoformat(text)
    except ValueError as exc:
        raise BadRange(f"not a date (YYYY-MM-DD): {text!r}") from exc
    start = datetime.combine(day, time(), tzinfo=UTC)
    if not end:
        return start
    # the last day there is has no next one: its last instant instead
    return start + timedelta(days=1) if day < date.max else datetime.combine(day, time.max, UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    by: str
    since: datetime
    until: datetime
    rows: list[UsageRow]
    budgets: list[dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "rows": [
                {
                    "key": r.key,
                    "cost": _num(r.cost),
                    "prompt_tokens": r.prompt_tokens,
                    "completion_tokens": r.completion_tokens,
                    "tokens": r.tokens,
                    "calls": r.calls,
                    "accounts": list(r.accounts),
                }
                for r in self.rows
            ],
            "budgets": self.budgets,
        }


def _num(value: Decimal | None) -> float | None:
    return None if value is None else float(value)


async def build_report(
    store: Store, budgets: Budgets, *, by: str, since: str | None = None, until: str | None = None
) -> Report:
    if by not in BY:
        raise BadRange(f"by must be one of {', '.join(BY)}")
    now = datetime.now(UTC)
    p = periods(now)
    start = parse_day(since, default=p.month_start)
    end = parse_day(until, default=now + timedelta(seconds=1), end=True)
    rows = await store.usage.report(by, since=start, until=end)  # type: ignore[arg-type]
    if by != "day":
        rows.sort(key=lambda r: (-(r.cost or Decimal(0)), -r.tokens, r.key))
    month = await store.usage.report("place", since=p.month_start, until=now + timedelta(seconds=1))
    return Report(by=by, since=start, until=end, rows=rows, budgets=_budgets(budgets, month))


def _budgets(budgets: Budgets, month_by_place: list[UsageRow]) -> list[dict[str, Any]]:
    """Each budget that is set, with what is left of it where it is one figure (this month
    in total, a given place); per-person and per-place limits apply to each on its own."""
    out: list[dict[str, Any]] = []
    total = _spent(month_by_place)
    for name, limit, per in (
        ("person_per_day", budgets.person_per_day, "each person, each day"),
        ("place_per_month", budgets.place_per_month, "each place, each month"),
    ):
        if limit.is_set:
            out.append(_entry(name, limit, per=per))
    if budgets.total_per_month.is_set:
        month = budgets.total_per_month
        out.append(_entry("total_per_month", month, per="this month", spent=total))
    for place in budgets.places:
        found = [r for r in month_by_place if place_matches(place.pattern, r.key)]
        name = f'places."{place.pattern}"'
        out.append(_entry(name, place.limit, per="this month", spent=_spent(found)))
    return out


def _spent(rows: list[UsageRow]) -> tuple[Decimal, int]:
    return sum((r.cost or Decimal(0) for r in rows), Decimal(0)), sum(r.tokens for r in rows)


def _entry(
    name: str, limit: Limit, *, per: str, spent: tuple[Decimal, int] | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "limit": name,
        "per": per,
        "cost": _num(limit.cost),
        "tokens": limit.tokens,
    }
    if spent is not None:
        entry["spent_cost"] = float(spent[0])
        entry["spent_tokens"] = spent[1]
        if limit.cost is not None:
            entry["left_cost"] = float(max(limit.cost - spent[0], Decimal(0)))
        if limit.tokens is not None:
            entry["left_tokens"] = max(limit.tokens - spent[1], 0)
    return entry


def render_text(report: Report) -> str:
    """The report as aligned columns, then the budgets."""
    people = report.by == "person"
    head = (report.by.upper(), "COST", "PROMPT", "COMPLETION", "CALLS")
    lines = [(*head, "ACCOUNTS") if people else head]
    for r in report.rows:
        money = amount(r.cost)
        row = (r.key, money, str(r.prompt_tokens), str(r.completion_tokens), str(r.calls))
        lines.append((*row, ",".join(r.accounts)) if people else row)
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines
    ]
    since, until = report.since.date(), (report.until - timedelta(seconds=1)).date()
    text.insert(0, f"usage {since} .. {until} (UTC) by {report.by}")
    if not report.rows:
        text.append("(no usage in this range)")
    text.append("")
    text.append("budgets:" if report.budgets else "budgets: none set")
    for b in report.budgets:
        limit = " / ".join(
            x for x in (_fmt(b["cost"]), f"{b['tokens']} tokens" if b["tokens"] else "") if x
        )
        left = ""
        if "spent_cost" in b:
            left = f"; spent {amount(b['spent_cost'])} / {b['spent_tokens']} tokens"
            if "left_cost" in b:
                left += f", left {amount(b['left_cost'])}"
            if "left_tokens" in b:
                left += f", left {b['left_tokens']} tokens"
        text.append(f"  {b['limit']}: {limit} ({b['per']}){left}")
    return "\n".join(text)


def _fmt(value: float | None) -> str:
    return "" if value is None else amount(value)


def amount(value: Decimal | float | None) -> str:
    """A sum of money in as many digits as it needs, never rounded away: at least two
    decimals (``5.00``, ``0.15``), a limit or price exactly as set (``0.00005``, not
    ``0.00``), and a computed spend to six decimals, or to three significant digits when it
    is smaller (``0.000000123``). ``-`` for none."""
    if value is None:
        return "-"
    d = Decimal(str(value))
    if not d.is_finite() or d == 0:
        return "0.00" if d == 0 else str(d)
    exact = max(0, -int(d.normalize().as_tuple().exponent))
    places = max(2, min(exact, max(6, 2 - d.adjusted())))
    return f"{d.quantize(Decimal(1).scaleb(-places)):f}"
