"""The usage ledger (one row per model call), the versioned price sets, and the one read a
budget check makes. A turn's rows are written by the turn's finish statement
(``queries.FINISH_TURN_OUTBOX``), never in a transaction of their own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from session_store.db import Database
from session_store.rows import reader
from session_store.sql import load
from session_store.values import SessionKey

SQL = load(__package__, "usage.sql")

UsageKind = Literal["answer", "tool_step", "summary"]
ReportBy = Literal["person", "place", "model", "day"]


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageCharge:
    """One model call to write to the ledger with the turn's answer."""

    #: who pays: ``platform:scope:user_id``; None charges the place
    account: str | None
    model: str
    kind: UsageKind
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal | None
    price_version: int | None
    #: the turn's reply (1-based, in the order written) the call produced; None: none
    reply: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetState:
    person_id: int | None
    person_day_cost: Decimal
    person_day_tokens: int
    person_day_answers: int
    person_month_cost: Decimal
    person_month_tokens: int
    place_month_cost: Decimal
    place_month_tokens: int
    place_month_answers: int
    total_month_cost: Decimal
    total_month_tokens: int
    total_month_answers: int
    person_running: int
    place_running: int
    total_running: int


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageRow:
    key: str
    cost: Decimal | None
    prompt_tokens: int
    completion_tokens: int
    calls: int
    accounts: tuple[str, ...]

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerRow:
    id: int
    at: datetime
    account: str | None
    person_id: int | None
    place: str
    session_id: int | None
    message_id: int | None
    model: str
    kind: str
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal | None
    price_version: int | None


def place_of(key: SessionKey) -> str:
    """The place a session's usage is charged to: its chat or channel, every thread."""
    return key.chat_text


_state = reader(BudgetState)
_ledger = reader(LedgerRow)


def charge_columns(charges: tuple[UsageCharge, ...] | list[UsageCharge]) -> tuple[list[Any], ...]:
    """The finish statement's ledger arrays, column by column."""
    return (
        [c.account for c in charges],
        [c.reply for c in charges],
        [c.model for c in charges],
        [c.kind for c in charges],
        [c.prompt_tokens for c in charges],
        [c.completion_tokens for c in charges],
        [c.cost for c in charges],
        [c.price_version for c in charges],
    )


class Usage:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def price_version(self, digest: str, prices: Mapping[str, Any]) -> int:
        """The version of this price set: the newest one when it is the same, else a new
        one (replicas starting at once agree: an advisory lock serializes them)."""
        async with self.db.transaction() as conn:
            await conn.execute(SQL.price_lock)
            row = await conn.fetchrow(SQL.latest_price_set)
            if row is not None and row["digest"] == digest:
                return int(row["version"])
            # the mapping itself: the pool's jsonb codec encodes it (a json.dumps string here
            # was encoded again and stored as a JSON string, not an object)
            return int(await conn.fetchval(SQL.add_price_set, digest, dict(prices)))

    async def budget_state(
        self,
        *,
        account: str | None,
        place: str,
        day_start: datetime,
        month_start: datetime,
        session_id: int,
    ) -> BudgetState:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.budget_state, account, place, day_start, month_start, session_id
            )
        assert row is not None  # an aggregate always returns its row
        return _state(row)

    async def notice_once(
        self, *, limit: str, subject: str, place: str, period_start: datetime
    ) -> bool:
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.notice_once, limit, subject, place, period_start)
        return bool(value)

    async def report(self, by: ReportBy, *, since: datetime, until: datetime) -> list[UsageRow]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.report, by, since, until)
        return [
            UsageRow(
                key=r["key"],
                cost=r["cost"],
                prompt_tokens=int(r["prompt_tokens"] or 0),
                completion_tokens=int(r["completion_tokens"] or 0),
                calls=int(r["calls"]),
                accounts=tuple(r["accounts"] or ()),
            )
            for r in rows
        ]

    async def add(self, charge: UsageCharge, *, place: str, session_id: int | None) -> None:
        """One call outside a turn's answer (a summary)."""
        async with self.db.connection() as conn:
            await conn.execute(
                SQL.add_usage,
                charge.account,
                place,
                session_id,
                None,
                charge.model,
                charge.kind,
                charge.prompt_tokens,
                charge.completion_tokens,
                charge.cost,
                charge.price_version,
            )

    async def ledger(self, session_id: int) -> list[LedgerRow]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.ledger_rows, session_id)
        return [_ledger(r) for r in rows]
