"""The plans of ``--only scale``: each measured operation's statements (the gateway's own, from
its ``.sql`` files) under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` at the largest size, each
in a transaction rolled back, and a one-line summary of a plan: what it scans and how."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import asyncpg

from session_store.estimates import EXACT_UP_TO
from session_store.repos.inbox import SQL as INBOX_SQL
from session_store.repos.inbox import _ingest_args
from session_store.repos.operator import FEW_MATCHES
from session_store.repos.operator import SQL as OPERATOR_SQL
from session_store.repos.outbox import SQL as OUTBOX_SQL
from session_store.repos.sessions import SQL as SESSIONS_SQL
from session_store.repos.turns import SQL as TURNS_SQL
from session_store.values import SessionKey

if TYPE_CHECKING:
    from benchmarks.scale import Bench

#: tables whose other relations in a plan are their partitions
TABLES = ("sessions", "messages", "inbound_events", "deliveries", "message_annotations")


async def explain(conn: asyncpg.Connection, sql: str, *args: Any) -> Any:
    """The JSON plan of ``sql`` run once with ``args``; whatever it wrote is rolled back."""
    tr = conn.transaction()
    await tr.start()
    try:
        found = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
    finally:
        await tr.rollback()
    return json.loads(found) if isinstance(found, str) else found


Job = tuple[str, str, str, tuple[Any, ...]]  # figure, statement name, SQL, parameters


def _hot_jobs(bench: Bench, *, due: list[int], seq: int, event: dict[str, Any]) -> list[Job]:
    """The hot path's statements, with the parameters the store would pass."""
    from benchmarks.scale import CONTEXT_FIRST_PAGE, PENDING_LIMIT, key_of, message

    rng = random.Random(7)
    platforms = list({key_of(n).platform for n in range(4)})
    old = message(key_of(rng.randint(1, bench.step.sessions)), "explain-o")
    new = message(SessionKey(platform="telegram", scope="sc", chat_id="new-explain"), "explain-n")
    dup = list(
        _ingest_args(
            message(SessionKey(platform=event["platform"], scope="sc", chat_id="d"), "explain-d"),
            None,
        )
    )
    dup[1], dup[2] = event["event_id"], event["message_key"]
    ingest = INBOX_SQL.ingest_message
    # owner, lease, platforms, process, the woken session (none: the longest-waiting, as the
    # timed figure claims), pending, context page
    claim = (str(uuid.uuid4()), 60.0, platforms, None, None, PENDING_LIMIT, CONTEXT_FIRST_PAGE)
    return [
        ("ingest_existing", "ingest_message", ingest, _ingest_args(old, {"update_id": 1})),
        ("ingest_existing", "context_newest_first", TURNS_SQL.context_newest_first,
         (due[0], 0, seq, 50)),
        ("ingest_new", "ingest_message", ingest, _ingest_args(new, {"update_id": 2})),
        ("turn_claim", "claim_turn_context", TURNS_SQL.claim_turn_context, claim),
        ("delivery_claim", "claim_deliveries", OUTBOX_SQL.claim_deliveries,
         (60.0, platforms, 1, None, str(uuid.uuid4()))),
        ("dedupe", "ingest_message", ingest, tuple(dup)),
    ]  # fmt: skip


def _read_jobs(counts: dict[str, int]) -> list[Job]:
    """Search (the plan the store picks for each word's count of matches) and the operator
    list and counts."""
    jobs: list[Job] = []
    for name, word in (("search_rare", "needle"), ("search_some", "invoice"),
                       ("search_common", "gateway")):  # fmt: skip
        which = "search_all_few" if counts[word] <= FEW_MATCHES else "search_all_many"
        jobs += [
            (name, "search_all_count", OPERATOR_SQL.search_all_count,
             (word, None, FEW_MATCHES + 1)),
            (name, which, OPERATOR_SQL[which], (word, None, None, 21)),
        ]  # fmt: skip
    # platform, chat, status, title, thread, cursor?, cursor, limit; topic, priority, tags
    first_page = (None, None, None, None, None, False, None, None, 51, None, None, None)
    jobs.append(("ops_list", "list_sessions", SESSIONS_SQL.list_sessions, first_page))
    cap = (EXACT_UP_TO + 1,)
    for query, sql, args in (
        ("session_counts", OPERATOR_SQL.session_counts, cap),
        ("open_delivery_counts", OUTBOX_SQL.open_delivery_counts, ()),
        ("sent_delivery_count", OUTBOX_SQL.sent_delivery_count, cap),
        ("inbound_counts", OPERATOR_SQL.inbound_counts, ()),
        ("oldest_pending_age", OUTBOX_SQL.oldest_pending_age, ()),
    ):
        jobs.append(("ops_stats", query, sql, args))
    return jobs


async def explain_all(
    bench: Bench, *, due: list[int], pending: list[int], event: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """name -> [{query, plan}] for every figure of ``scale.LABELS``."""
    assert pending  # the delivery claim's plan is of a claim that finds one
    out: dict[str, list[dict[str, Any]]] = {}
    async with bench.store.db.connection() as conn:
        seq = await conn.fetchval("SELECT last_seq_no FROM sessions WHERE id = $1", due[0])
        counts = {
            word: await conn.fetchval(OPERATOR_SQL.search_all_count, word, None, FEW_MATCHES + 1)
            for word in ("needle", "invoice", "gateway")
        }
        jobs = _hot_jobs(bench, due=due, seq=seq, event=event) + _read_jobs(counts)
        for name, query, sql, args in jobs:
            plan = await explain(conn, sql, *args)
            out.setdefault(name, []).append({"query": query, "plan": plan})
    return out


def _known() -> dict[str, str]:
    """The gateway's statements measured here, by their text."""
    named = {
        "ingest_message": INBOX_SQL.ingest_message,
        "context_newest_first": TURNS_SQL.context_newest_first,
        "claim_turn_context": TURNS_SQL.claim_turn_context,
        "claim_deliveries": OUTBOX_SQL.claim_deliveries,
        "list_sessions": SESSIONS_SQL.list_sessions,
        "open_delivery_counts": OUTBOX_SQL.open_delivery_counts,
        "sent_delivery_count": OUTBOX_SQL.sent_delivery_count,
        "oldest_pending_age": OUTBOX_SQL.oldest_pending_age,
    }
    for name in ("search_all_count", "search_all_few", "search_all_many", "session_counts"):
        named[name] = OPERATOR_SQL[name]
    return {sql: name for name, sql in named.items()}


async def plan_choices(conn: asyncpg.Connection) -> dict[str, dict[str, int]]:
    """How often PostgreSQL planned each of the gateway's statements for its parameters
    (custom) and how often it ran its one generic plan, on this connection (the store's
    only one in this benchmark): asyncpg keeps statements prepared, and after five runs the
    server may switch a statement to a generic plan that ignores the values."""
    known = _known()
    rows = await conn.fetch(
        "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
    )
    return {
        known[r["statement"]]: {"generic": r["generic_plans"], "custom": r["custom_plans"]}
        for r in rows
        if r["statement"] in known
    }


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def work(found: list[dict[str, Any]]) -> dict[str, float]:
    """The pages (shared hit + read) and server execution ms of one operation's plans."""
    pages = exec_ms = 0.0
    for p in found:
        top = p["plan"][0]
        root = top["Plan"]
        pages += root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0)
        exec_ms += top["Execution Time"]
    return {"pages": pages, "exec_ms": exec_ms}


def plan_summary(plan: Any) -> str:
    """``1.23 ms; Index Scan using messages_session_seq on messages, ...; buffers hit 12 read
    0``, with the partitions of a partitioned table counted, and SEQ SCAN in capitals."""
    top = plan[0]
    scans: list[str] = []
    partitions: dict[str, set[str]] = {}
    for node in _nodes(top["Plan"]):
        kind = node["Node Type"]
        rel = node.get("Relation Name")
        if rel and rel not in TABLES:
            parent = next((t for t in TABLES if rel.startswith(t + "_")), None)
            if parent is not None:
                partitions.setdefault(parent, set()).add(rel)
                rel = parent
        if "Scan" not in kind and kind not in ("ModifyTable",):
            continue
        if kind == "Seq Scan":
            kind = "SEQ SCAN"
        what = f"{kind} {node.get('Index Name') or rel or ''}".strip()
        if node.get("Operation"):
            what = f"{node['Operation']} {rel}"
        if what not in scans:
            scans.append(what)
    root = top["Plan"]
    parts = "".join(f"; {t}: {len(p)} partitions" for t, p in partitions.items())
    return (
        f"{top['Execution Time']:.2f} ms; {', '.join(scans)}; buffers hit "
        f"{root.get('Shared Hit Blocks', 0)} read {root.get('Shared Read Blocks', 0)}{parts}"
    )
