"""``python -m benchmarks --only scale``: does a request's cost stay flat as the database grows?

One database grows in steps (``scale_fill``: by default 10k messages in 1k sessions, then 1M
in 100k, then 10M in 1M); at each size the gateway's own store code runs each operation a
few hundred times, one at a time, and the report gives p50 and p99 and their ratio to the
smallest size:

- the hot path: ``Inbox.ingest`` of a new inbound message, then the context page a turn reads
  (``Turns.context_page``), on a random existing session and on a new one;
- the turn claim the scheduler makes (``Turns.claim_turn`` with its pending messages and first
  context page) with five sessions due among all of them;
- the delivery claim the outbox workers make (``Outbox.claim_deliveries``) with five pending
  deliveries among the sent ones;
- the inbox dedupe: ``Inbox.ingest`` of an event whose id is already stored;
- full-text search across sessions (``OperatorStore.search``, what ``GET /api/v1/search``,
  ``/ops`` and the CLI run) for a word with a fixed 20 hits, a word in 1% of messages and a
  word in every message;
- the operator session list's first page (``Store.list_sessions``, newest first, as ``/ops``
  and ``GET /api/v1/sessions``) and the live counts ``/ops`` shows (``GET /api/v1/stats``).

At the largest size each operation's statements are also run under
``EXPLAIN (ANALYZE, BUFFERS)`` (in a transaction rolled back): the plans go to the JSON, a
one-line summary of each to the report."""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks import scale_fill as fill
from benchmarks.common import pct, scratch_database
from benchmarks.scale_plans import explain_all, plan_choices, plan_summary, work
from session_store.records import InboundMessage
from session_store.repos.operator import OperatorStore
from session_store.store import Store
from session_store.values import ReplyTarget, SessionKey

#: figures within this factor of the smallest size count as flat
GOAL = 1.3
#: the hot path: what every message pays (the goal applies to these)
HOT = ("ingest_existing", "ingest_new", "turn_claim", "delivery_claim", "dedupe")
LABELS = {
    "ingest_existing": "ingest + context read, existing session",
    "ingest_new": "ingest + context read, new session",
    "turn_claim": "turn claim (5 due)",
    "delivery_claim": "delivery claim (5 pending)",
    "dedupe": "inbox dedupe (event already stored)",
    "search_rare": f"search, word with 20 hits ({fill.RARE})",
    "search_some": f"search, word in 1% of messages ({fill.SOME})",
    "search_common": "search, word in every message (gateway)",
    "ops_list": "operator session list, first page",
    "ops_stats": "operator live counts (/api/v1/stats)",
    "control": "control: one-row upsert and commit (an adapter cursor)",
}
#: what does not depend on the database's size: its ratio is the machine's drift (other work,
#: the disk), and "adjusted" ratios divide it out
DUE = 5
#: seconds one figure may take at one size, and the fewest samples it stops at
BUDGET_S = 20.0
MIN_SAMPLES = 20
#: what the turn scheduler asks with its claim (gateway.turns.scheduler)
PENDING_LIMIT = 1000
CONTEXT_FIRST_PAGE = 64


@dataclass(frozen=True)
class Step:
    sessions: int
    messages: int


FULL = (Step(1_000, 10_000), Step(100_000, 1_000_000), Step(1_000_000, 10_000_000))
QUICK = (Step(1_000, 10_000), Step(10_000, 100_000), Step(100_000, 1_000_000))
TINY = (Step(100, 1_000), Step(200, 2_000), Step(400, 4_000))


def key_of(n: int) -> SessionKey:
    """The key of filled session ``n`` (``scale_fill``'s layout)."""
    thread = f"t{n}" if n % 4 in (1, 2) else None
    return SessionKey(platform=fill.PLATFORMS[n % 4], scope="sc", chat_id=f"c{n}", thread_id=thread)


def message(key: SessionKey, tag: str, *, event_id: str | None = None) -> InboundMessage:
    """A new inbound user message in ``key``'s place that asks for a turn."""
    mid = f"x{tag}"
    return InboundMessage(
        key=key,
        target=ReplyTarget(
            platform=key.platform,
            scope=key.scope,
            chat_id=key.chat_id,
            thread_id=key.thread_id,
            reply_to_message_id=mid,
        ),
        external_id=mid,
        message_key=f"{key.scope}:{key.chat_id}:{mid}",
        content=f"how do I export the report in the gateway #{tag}",
        sender_id="u",
        sender_name="person",
        event_id=event_id or f"ex{tag}",
        turn_request="always",
    )


class Bench:
    """The operations measured at one size, through one ``Store``."""

    def __init__(self, store: Store, step: Step, iterations: int, rng: random.Random) -> None:
        self.store = store
        self.ops = OperatorStore(store)
        self.step = step
        self.iterations = iterations
        self.rng = rng
        self.tag = f"{step.messages}"

    async def timed(
        self,
        op: Callable[[int], Awaitable[Any]],
        *,
        after: Callable[[int], Awaitable[Any]] | None = None,
        warmup: int = 10,
    ) -> dict[str, float]:
        """p50/p99 of ``op(i)`` over the iterations (``after(i)`` runs untimed), or over as
        many as ``BUDGET_S`` allows (at least ``MIN_SAMPLES``): ``n`` says how many."""
        latencies: list[float] = []
        deadline = time.perf_counter() + BUDGET_S
        for i in range(-min(warmup, self.iterations), self.iterations):
            t0 = time.perf_counter()
            await op(i)
            if i >= 0:
                latencies.append(time.perf_counter() - t0)
            if after is not None:
                await after(i)
            if len(latencies) >= MIN_SAMPLES and time.perf_counter() > deadline:
                break  # a figure that grew with the database: fewer samples, same report
        return {
            "p50_ms": pct(latencies, 0.5) * 1000,
            "p99_ms": pct(latencies, 0.99) * 1000,
            "n": len(latencies),
        }

    async def ingest(self, *, new: bool) -> dict[str, float]:
        store, kind = self.store, "n" if new else "o"

        async def op(i: int) -> None:
            tag = f"{self.tag}-{kind}{i}"
            if new:
                key = SessionKey(platform="telegram", scope="sc", chat_id=f"new-{tag}")
            else:
                key = key_of(self.rng.randint(1, self.step.sessions))
            got = await store.inbox.ingest(message(key, tag), raw={"update_id": tag})
            assert got.status == "accepted" and got.session_id and got.seq_no, got
            page = await store.turns.context_page(
                got.session_id, after_seq=0, upto_seq=got.seq_no, limit=50
            )
            assert page and page[0].seq_no == got.seq_no

        return await self.timed(op)

    async def answer_all(self) -> None:
        """Mark every due session answered (the ingests above asked for turns)."""
        async with self.store.db.connection() as conn:
            await conn.execute(
                "UPDATE sessions SET turn_done_seq = turn_requested_seq, turn_owner = NULL, "
                "turn_lease_until = NULL WHERE turn_requested_seq > turn_done_seq"
            )

    async def make_due(self) -> list[int]:
        """``DUE`` random sessions with a new message asking for a turn."""
        ids = []
        for j in range(DUE):
            key = key_of(self.rng.randint(1, self.step.sessions))
            got = await self.store.inbox.ingest(message(key, f"{self.tag}-due{j}"), raw=None)
            assert got.session_id is not None
            ids.append(got.session_id)
        return ids

    async def turn_claim(self) -> dict[str, float]:
        store = self.store
        claims: list[Any] = []

        async def op(i: int) -> None:
            claim = await store.turns.claim_turn(
                lease_seconds=60,
                platforms=list(fill.PLATFORMS),
                with_pending=PENDING_LIMIT,
                context_page=CONTEXT_FIRST_PAGE,
            )
            assert claim is not None
            claims.append(claim)

        async def release(i: int) -> None:
            await store.turns.release_turn(claims.pop())

        return await self.timed(op, after=release)

    async def make_pending(self) -> list[int]:
        """``DUE`` pending deliveries: a second part of random sessions' last answers."""
        picks = [self.rng.randint(1, self.step.sessions) for _ in range(DUE)]
        async with self.store.db.connection() as conn:
            rows = await conn.fetch(
                """INSERT INTO deliveries (message_id, session_id, seq_no, part_no, platform,
                                          target, content)
                   SELECT m.id, m.session_id, m.seq_no, 1, s.platform,
                          jsonb_build_object('platform', s.platform, 'scope', s.scope,
                                             'chat_id', s.chat_id), 'and one more thing'
                   FROM sessions s JOIN messages m ON m.session_id = s.id
                   WHERE s.id = ANY($1::bigint[]) AND m.seq_no = $2
                   ON CONFLICT DO NOTHING
                   RETURNING id""",
                picks,
                fill.PER_SESSION,
            )
        return [r["id"] for r in rows]

    async def delivery_claim(self, pending: list[int]) -> dict[str, float]:
        store = self.store

        async def op(i: int) -> None:
            got = await store.outbox.claim_deliveries(
                platforms=list(fill.PLATFORMS), lease_seconds=60
            )
            assert len(got) == 1 and got[0].id in pending, got

        async def back(i: int) -> None:
            async with store.db.connection() as conn:
                await conn.execute(
                    "UPDATE deliveries SET status = 'pending', lease_until = NULL, "
                    "claim_token = NULL, claim_process = NULL WHERE id = ANY($1::bigint[])",
                    pending,
                )

        return await self.timed(op, after=back)

    async def stored_events(self) -> list[dict[str, Any]]:
        """Some inbox rows of the fill, at random (ids are the user messages' numbers)."""
        wanted = [self.rng.randint(1, self.step.messages) for _ in range(4 * self.iterations)]
        async with self.store.db.connection() as conn:
            rows = await conn.fetch(
                "SELECT platform, event_id, message_key FROM inbound_events "
                "WHERE id = ANY($1::bigint[]) AND event_id LIKE 'e%'",
                wanted,
            )
        return [dict(r) for r in rows]

    async def dedupe(self, events: list[dict[str, Any]]) -> dict[str, float]:
        store = self.store

        async def op(i: int) -> None:
            ev = events[i % len(events)]
            item = replace(
                message(SessionKey(platform=ev["platform"], scope="sc", chat_id="dup"), f"d{i}"),
                event_id=ev["event_id"],
                message_key=ev["message_key"],
            )
            got = await store.inbox.ingest(item, raw=None)
            assert got.status == "duplicate", got

        return await self.timed(op)

    async def search(self, word: str) -> dict[str, float]:
        async def op(i: int) -> None:
            await self.ops.search(word, limit=21)  # a page of 20 and one to see if more

        return await self.timed(op)

    async def ops_list(self) -> dict[str, float]:
        async def op(i: int) -> None:
            rows = await self.store.sessions.list_sessions(limit=51)
            assert len(rows) == 51

        return await self.timed(op, warmup=3)

    async def control(self) -> dict[str, float]:
        async def op(i: int) -> None:
            await self.store.inbox.save_cursor("scale-control", str(i))

        return await self.timed(op)

    async def ops_stats(self) -> dict[str, Any]:
        async def op(i: int) -> None:
            await self.ops.counts()

        figs: dict[str, Any] = await self.timed(op, warmup=1)
        # how far the estimates are from the exact counts (a scan of each table, untimed)
        counts = await self.ops.counts()
        async with self.store.db.connection() as conn:
            exact = {
                f"{table}.{r['status']}": r["n"]
                for table in ("sessions", "deliveries")
                for r in await conn.fetch(
                    f"SELECT status, count(*) AS n FROM {table} GROUP BY status"
                )
            }
        given = {f"sessions.{k}": v for k, v in counts.sessions.items()} | {
            f"deliveries.{k}": v for k, v in counts.deliveries.items()
        }
        figs["estimates"] = {name: [given[name], exact.get(name, 0)] for name in counts.approximate}
        print(f"    ops_stats estimates (given, exact): {figs['estimates']}", file=sys.stderr)
        return figs


async def measure(bench: Bench, *, explain: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every figure at this size; and the plans when ``explain``."""
    figs: dict[str, Any] = {}
    plans: dict[str, Any] = {}

    def note(name: str) -> None:
        f = figs[name]
        print(f"    {name}: p50 {f['p50_ms']:.2f} ms, p99 {f['p99_ms']:.2f} ms", file=sys.stderr)

    figs["control"] = await bench.control()
    note("control")
    figs["ingest_existing"] = await bench.ingest(new=False)
    note("ingest_existing")
    figs["ingest_new"] = await bench.ingest(new=True)
    note("ingest_new")
    await bench.answer_all()
    due = await bench.make_due()
    figs["turn_claim"] = await bench.turn_claim()
    note("turn_claim")
    pending = await bench.make_pending()
    figs["delivery_claim"] = await bench.delivery_claim(pending)
    note("delivery_claim")
    events = await bench.stored_events()
    figs["dedupe"] = await bench.dedupe(events)
    note("dedupe")
    for name, word in (("search_rare", fill.RARE), ("search_some", fill.SOME)):
        figs[name] = await bench.search(word)
        note(name)
    figs["search_common"] = await bench.search("gateway")
    note("search_common")
    figs["ops_list"] = await bench.ops_list()
    note("ops_list")
    figs["ops_stats"] = await bench.ops_stats()
    note("ops_stats")
    figs["control_after"] = await bench.control()  # the drift during this size's figures
    note("control_after")
    async with bench.store.db.connection() as conn:
        figs["plan_choices"] = await plan_choices(conn)
    # at every size: the pages each operation touches do not depend on the machine's load
    plans = await explain_all(bench, due=due, pending=pending, event=events[0])
    figs["work"] = {name: work(found) for name, found in plans.items()}
    if not explain:
        plans = {}
    async with bench.store.db.connection() as conn:
        await conn.execute(
            "UPDATE deliveries SET status = 'sent' WHERE id = ANY($1::bigint[])", pending
        )
    await bench.answer_all()
    return figs, plans


async def run_scale(srv: Any, *, steps: tuple[Step, ...], iterations: int) -> dict[str, Any]:
    rng = random.Random(33)
    anchor = datetime.now(UTC) - timedelta(milliseconds=steps[-1].messages * fill.SPACING_MS)
    out: dict[str, Any] = {"steps": [], "goal": GOAL, "hot": list(HOT), "labels": LABELS}
    async with scratch_database(srv) as dsn:
        sessions = messages = 0
        for n, step in enumerate(steps):
            print(
                f"  fill to {step.messages:,} messages in {step.sessions:,} sessions",
                file=sys.stderr,
            )
            took = await fill.grow(
                dsn,
                sessions=(sessions, step.sessions),
                messages_before=messages,
                anchor=anchor,
                reserve=steps[-1].messages,
            )
            sessions, messages = step.sessions, step.messages
            print(f"    fill took {took['fill_s']:.0f} s", file=sys.stderr)
            # one connection: its prepared statements show which plans the server chose
            store = await Store.connect(dsn, min_size=1, max_size=1)
            try:
                bench = Bench(store, step, iterations, rng)
                figs, plans = await measure(bench, explain=n == len(steps) - 1)
                async with store.db.connection() as conn:
                    size = await conn.fetchval("SELECT pg_database_size(current_database())")
            finally:
                await store.close()
            out["steps"].append(
                {
                    "sessions": step.sessions,
                    "messages": step.messages,
                    "fill": took,
                    "db_bytes": size,
                    "figures": figs,
                }
            )
            if plans:
                out["plans"] = plans
    out["ratios"] = ratios(out["steps"])
    base = out["steps"][-1]["messages"]
    last = {name: out["ratios"][name][str(base)] for name in HOT}
    out["over_goal"] = [name for name in HOT if last[name]["p50"] > GOAL]
    out["over_goal_adjusted"] = [name for name in HOT if last[name]["adjusted"] > GOAL]
    return out


def _control(figures: dict[str, Any]) -> float:
    return float(figures["control"]["p50_ms"] + figures["control_after"]["p50_ms"]) / 2


def ratios(steps: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Each figure at each size ÷ the same figure at the smallest size; ``adjusted``: the p50
    ratio ÷ the control's (the machine's drift between the two sizes divided out)."""
    first = {k: v for k, v in steps[0]["figures"].items() if k not in ("plan_choices", "work")}
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in first:
        out[name] = {}
        for s in steps:
            figs = s["figures"]
            r = {q: figs[name][f"{q}_ms"] / first[name][f"{q}_ms"] for q in ("p50", "p99")}
            r["adjusted"] = r["p50"] / (_control(figs) / _control(first))
            out[name][str(s["messages"])] = r
    return out


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"


def scale_markdown(r: dict[str, Any]) -> list[str]:
    steps = r["steps"]
    sizes = [_size(s["messages"]) for s in steps]
    head = " | ".join(f"p50 / p99 ms at {z}" for z in sizes)
    ratio_head = " | ".join(f"{z} ÷ {sizes[0]} (p50 / p99 / adjusted p50)" for z in sizes[1:])
    lines = [
        f"| operation | {head} | {ratio_head} |",
        "|---" * (1 + len(sizes) + len(sizes) - 1) + "|",
    ]
    for name, label in r["labels"].items():
        cells = [
            f"{s['figures'][name]['p50_ms']:.2f} / {s['figures'][name]['p99_ms']:.2f}"
            for s in steps
        ]
        rs = [r["ratios"][name][str(s["messages"])] for s in steps[1:]]
        mark = " (hot path)" if name in r["hot"] else ""
        lines.append(
            f"| {label}{mark} | "
            + " | ".join(cells)
            + " | "
            + " | ".join(f"{x['p50']:.2f} / {x['p99']:.2f} / {x['adjusted']:.2f}" for x in rs)
            + " |"
        )
    lines += [
        "",
        "Pages each operation's statements touched (EXPLAIN ANALYZE, BUFFERS: shared hit + "
        "read; the work itself, whatever the machine's load), and server execution ms:",
        "",
        "| operation | " + " | ".join(f"pages (ms) at {z}" for z in sizes) + " |",
        "|---" * (1 + len(sizes)) + "|",
    ]
    for name, label in r["labels"].items():
        if name not in steps[-1]["figures"].get("work", {}):
            continue
        done = [s["figures"]["work"][name] for s in steps]
        cells = [f"{int(w['pages']):,} ({w['exec_ms']:.2f})" for w in done]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "Fill (insert, index build, VACUUM ANALYZE) and database size:", ""]
    for s in steps:
        f = s["fill"]
        lines.append(
            f"- {s['messages']:,} messages in {s['sessions']:,} sessions: fill {f['fill_s']:.0f} s "
            f"(insert {f['insert_s']:.0f} s, indexes {f['index_s']:.0f} s, VACUUM ANALYZE "
            f"{f['vacuum_analyze_s']:.0f} s); database {s['db_bytes'] / 2**30:.2f} GiB"
        )
    if r.get("plans"):
        lines += ["", f"Plans at {sizes[-1]} (EXPLAIN ANALYZE, BUFFERS; full plans in --json):", ""]
        for name, plans in r["plans"].items():
            for p in plans:
                lines.append(
                    f"- {r['labels'].get(name, name)}, `{p['query']}`: {plan_summary(p['plan'])}"
                )
    generic = sorted(
        {q for s in steps for q, c in s["figures"].get("plan_choices", {}).items() if c["generic"]}
    )
    lines += [
        "",
        "Statements PostgreSQL ran with a generic plan (prepared, values ignored) at some size: "
        + (", ".join(f"`{q}`" for q in generic) if generic else "none"),
    ]
    for key, how in (("over_goal", "as measured"), ("over_goal_adjusted", "adjusted")):
        over = r.get(key) or []
        lines.append(
            f"Hot-path figures over {r['goal']} times the smallest size at the largest (p50, "
            f"{how}): " + (", ".join(r["labels"][n] for n in over) if over else "none")
        )
    lines += [
        "",
        "Adjusted: the ratio divided by the control's ratio (the mean of its p50 before and "
        "after the size's figures), so that the machine's drift between sizes (other work, "
        "the disk) is not read as growth.",
        "",
    ]
    return lines
