"""The write budget of one message, and a log that checks a gateway against it.

One inbound message costs the database four transactions: one stores it with all it implies
(dedupe, session, turn request, engagement), one claims its turn and reads the context, one
finishes the turn (answer, deliveries, usage charge, audit row, profile), one marks its
delivery sent (batched with other receipts where several are due). Anything else rides in
one of these or goes on the cold path in batches.

``TransactionLog`` records every statement the gateway's pool sends (asyncpg's query logger
on each pooled connection) and groups them, per connection, into the transactions PostgreSQL
commits: an explicit ``BEGIN`` ... ``COMMIT`` block is one, any other statement is one of its
own. Each is put under the kind of the budget its first statement belongs to, or ``other``.
The e2e benchmark classifies pg_stat_statements the same way (``kind_of``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import session_store.db as db_module

if TYPE_CHECKING:
    import pytest

#: transactions per kind of one ingest-answer-deliver cycle with the echo agent
BUDGET = {"ingest": 1, "claim": 1, "finish": 1, "delivery": 1, "other": 0}

#: a statement is one of the budget's transactions when its text (whitespace normalized)
#: starts with one of these
TRANSACTION_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ingest", ("WITH inbox AS", "INSERT INTO inbound_events")),
    ("claim", ("WITH c AS ( UPDATE sessions s SET turn_owner",)),
    ("finish", ("WITH fin AS",)),
    ("delivery", ("UPDATE deliveries",)),
)
KINDS = (*(kind for kind, _ in TRANSACTION_KINDS), "other")

_BEGIN = ("BEGIN", "START TRANSACTION")
#: what asyncpg itself asks the catalog the first time a connection meets a type (a pool that
#: opened a connection mid-cycle, on a loaded machine): read-only and once per connection, so
#: not a transaction of the message
_DRIVER_INTROSPECTION = (
    "SELECT current_setting('jit')",
    "SELECT set_config('jit'",
    "WITH RECURSIVE typeinfo_tree",
)
_END = ("COMMIT", "ROLLBACK", "END")


def normalized(query: str) -> str:
    return " ".join(query.split())


def kind_of(query: str) -> str | None:
    """The budget kind of one statement, or None (not one of the budget's)."""
    text = normalized(query)
    return next((kind for kind, starts in TRANSACTION_KINDS if text.startswith(starts)), None)


class TransactionLog:
    """The transactions a gateway's pool commits while ``recording`` is on."""

    def __init__(self) -> None:
        self.recording = False
        #: committed transactions, each the list of its statements (normalized)
        self.transactions: list[list[str]] = []
        self._open: dict[int, list[str]] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Log every connection a pool opens from now on (patch before the store connects)."""
        original = db_module._init_connection

        async def init(conn: Any) -> None:
            await original(conn)
            conn.add_query_logger(self._logger(id(conn)))

        monkeypatch.setattr(db_module, "_init_connection", init)

    def _logger(self, conn_id: int) -> Callable[[Any], None]:
        def logged(record: Any) -> None:
            if self.recording:
                self.statement(conn_id, record.query)

        return logged

    def statement(self, conn_id: int, query: str) -> None:
        text = normalized(query)
        upper = text.upper().rstrip(";")
        if text.startswith(_DRIVER_INTROSPECTION):
            return
        if upper.startswith(_BEGIN):
            self._open[conn_id] = [text]
        elif conn_id in self._open:
            self._open[conn_id].append(text)
            if upper.startswith(_END):
                self.transactions.append(self._open.pop(conn_id))
        else:
            self.transactions.append([text])

    def kind(self, transaction: list[str]) -> str:
        return next((k for q in transaction if (k := kind_of(q)) is not None), "other")

    def by_kind(self) -> dict[str, int]:
        counts = Counter(self.kind(t) for t in self.transactions)
        return {kind: counts.get(kind, 0) for kind in KINDS}

    def over_budget(self, budget: dict[str, int] = BUDGET) -> list[str]:
        """What exceeds ``budget``, with the statements that did: empty when within it."""
        counts = self.by_kind()
        out = []
        for kind, n in counts.items():
            if n > budget.get(kind, 0):
                shown = [t[0][:120] for t in self.transactions if self.kind(t) == kind]
                out.append(f"{kind}: {n} transactions, budget {budget.get(kind, 0)}: {shown}")
        return out
