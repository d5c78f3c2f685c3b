"""Retention against a real PostgreSQL: the inbox partitioned by month with dedupe exact
across months and across its own migration, each kind dropped after its window and never a
redelivery let through, closed sessions exported before they go, one replica at a time, and
``gateway retention show|run``."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from gateway.retention.policy import RetentionPolicy
from gateway.retention.service import Report, Retention
from session_store.migrator import load_migrations, migrate
from session_store.repos.inbox import SQL as INBOX_SQL
from session_store.store import Store
from testsupport.process import run_cli_in_process

NOW = datetime.now(UTC)


async def _insert(
    conn: asyncpg.Connection,
    event_id: str,
    *,
    status: str = "accepted",
    at: datetime | None = None,
    message_key: str | None = None,
) -> int | None:
    """The intake's inbox insert (ON CONFLICT DO NOTHING); the new row's id, None for a
    redelivery. ``at``: received then (moved afterwards, as if it had come in then)."""
    new = await conn.fetchval(
        INBOX_SQL.insert_inbound, "test", event_id, message_key, status, None, '{"raw": 1}'
    )
    if new is not None and at is not None:
        await conn.execute("UPDATE inbound_events SET received_at = $2 WHERE id = $1", new, at)
        await conn.execute(
            "UPDATE inbound_keys SET received_at = $2 WHERE inbound_event_id = $1", new, at
        )
    return None if new is None else int(new)


async def _partition_of(conn: asyncpg.Connection, event_id: str) -> str:
    return str(
        await conn.fetchval(
            "SELECT tableoid::regclass::text FROM inbound_events WHERE event_id = $1", event_id
        )
    )


def _policy(tmp: Path | None = None, **days: int) -> RetentionPolicy:
    windows = {"payload_days": 0, "dead_letter_days": 0, "dedupe_days": 0, "audit_days": 0}
    return RetentionPolicy(
        **(windows | days), export_dir=(tmp or Path("unused")) / "exports", interval=0.05
    )


async def test_migration_keeps_every_row_and_dedupe_across_the_month_boundary(
    empty_database_url: str,
) -> None:
    every = load_migrations()
    first = next(i for i, m in enumerate(every) if m.filename.startswith("0027"))
    await migrate(empty_database_url, every[:first])
    conn = await asyncpg.connect(empty_database_url)
    try:
        for n in range(50):  # the old table: some stored last month, some today
            at = NOW - timedelta(days=40) if n % 2 else NOW
            await conn.execute(
                "INSERT INTO inbound_events (platform, event_id, message_key, status, payload, "
                "received_at) VALUES ('test', $1, $2, 'accepted', '{}', $3)",
                f"old-{n}",
                f"chat:{n}",
                at,
            )
        await migrate(empty_database_url)
        assert await conn.fetchval("SELECT count(*) FROM inbound_events") == 50
        assert await conn.fetchval("SELECT count(*) FROM inbound_keys") == 50
        assert (await _partition_of(conn, "old-1")).startswith("inbound_events_before_")
        # a redelivery of an event stored last month (by either key) is still a duplicate
        assert await _insert(conn, "old-1") is None
        assert await _insert(conn, "other", message_key="chat:1") is None
        # a new event after the migration lands in a month partition, and its redelivery
        # a month later is refused too
        assert await _insert(conn, "fresh") is not None
        next_month = (NOW.replace(day=1) + timedelta(days=45)).replace(day=2)
        moved = await conn.fetchval(
            "INSERT INTO inbound_events (platform, event_id, status, received_at) "
            "VALUES ('test', 'fresh', 'accepted', $1) ON CONFLICT DO NOTHING RETURNING id",
            next_month,
        )
        assert moved is None
        assert await conn.fetchval("SELECT count(*) FROM inbound_events") == 51
    finally:
        await conn.close()


async def test_a_row_no_month_holds_goes_to_default_and_moves_when_its_month_is_made(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        far = datetime(2031, 5, 5, tzinfo=UTC)
        await conn.execute(
            "INSERT INTO inbound_events (platform, event_id, status, received_at) "
            "VALUES ('test', 'far', 'accepted', $1)",
            far,
        )
        assert await _partition_of(conn, "far") == "inbound_events_default"
        assert await conn.fetchval("SELECT inbound_ensure_partitions($1, 0)", far) == 1
        assert await _partition_of(conn, "far") == "inbound_events_2031_05"
        assert await _insert(conn, "far") is None
    finally:
        await conn.close()


async def test_payload_dropped_after_its_days_and_the_redelivery_still_deduped(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        old = await _insert(conn, "old", at=NOW - timedelta(days=40))
        recent = await _insert(conn, "recent", at=NOW - timedelta(days=5))
        report = await Retention(store.db, _policy(payload_days=30, dedupe_days=90)).once()
        assert report.counts["payloads"] == 1 and not report.errors
        payloads = dict(await conn.fetch("SELECT id, payload FROM inbound_events"))
        assert payloads[old] is None and payloads[recent] is not None
        assert await _insert(conn, "old") is None  # the row and its keys stayed
    finally:
        await store.close()
        await conn.close()


async def test_dead_letters_deleted_after_their_days_and_keys_after_the_dedupe_window(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        await _insert(conn, "rejected-old", status="rejected", at=NOW - timedelta(days=100))
        await _insert(conn, "ignored-old", status="ignored", at=NOW - timedelta(days=100))
        await _insert(conn, "rejected-new", status="rejected", at=NOW - timedelta(days=10))
        await _insert(conn, "accepted-old", at=NOW - timedelta(days=100))
        policy = _policy(dead_letter_days=90, dedupe_days=120)
        report = await Retention(store.db, policy).once()
        assert report.counts["dead_letters"] == 2 and report.counts["keys"] == 0
        left = {r["event_id"] for r in await conn.fetch("SELECT event_id FROM inbound_events")}
        assert left == {"rejected-new", "accepted-old"}
        # the dead letters' keys are kept for the dedupe window: still no second intake
        assert await _insert(conn, "rejected-old") is None
        # past the dedupe window the keys go too
        report = await Retention(store.db, _policy(dedupe_days=60)).once()
        assert report.counts["keys"] == 3
        assert await _insert(conn, "rejected-old") is not None
    finally:
        await store.close()
        await conn.close()


async def test_whole_month_partitions_past_every_window_are_dropped(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        await _insert(conn, "this-month")
        months = [
            r["name"]
            for r in await conn.fetch(
                "SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c "
                "ON c.oid = i.inhrelid WHERE i.inhparent = 'inbound_events'::regclass "
                "AND c.relname <> 'inbound_events_default' ORDER BY 1"
            )
        ]
        oldest = await _partition_of(conn, "this-month")
        assert oldest in months
        retention = Retention(
            store.db, _policy(payload_days=30, dead_letter_days=30, dedupe_days=30)
        )
        # three months on: the month holding the row is wholly past every window
        later = NOW + timedelta(days=130)
        plan = await retention.plan(later)
        assert oldest in plan.partitions
        report = await retention.once(later)
        assert oldest in report.partitions and not report.errors
        assert await conn.fetchval("SELECT to_regclass($1)", oldest) is None
        assert await conn.fetchval("SELECT count(*) FROM inbound_events") == 0
        # with any inbox window kept forever, no month is ever dropped
        assert (await Retention(store.db, _policy(payload_days=30)).plan(later)).partitions == []
    finally:
        await store.close()
        await conn.close()


async def _session(conn: asyncpg.Connection, chat: str, status: str, at: datetime) -> int:
    session_id = int(
        await conn.fetchval(
            "INSERT INTO sessions (platform, scope, chat_id, status, last_message_at, "
            "last_seq_no, message_count) VALUES ('test', 'chat', $1, $2, $3, 2, 2) "
            "RETURNING id",
            chat,
            status,
            at,
        )
    )
    event = await _insert(conn, f"{chat}-event", at=at)
    for seq, role in ((1, "user"), (2, "assistant")):
        message = await conn.fetchval(
            "INSERT INTO messages (session_id, seq_no, role, content, inbound_event_id, "
            "created_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            session_id,
            seq,
            role,
            f"{chat} secret {seq}",
            event if role == "user" else None,
            at,
        )
        await conn.execute(
            "INSERT INTO message_annotations (message_id, kind, content) "
            "VALUES ($1, 'edit', 'changed')",
            message,
        )
    return session_id


async def test_closed_sessions_are_exported_then_deleted_and_active_ones_untouched(
    database_url: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(database_url)
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        old = NOW - timedelta(days=400)
        closed = await _session(conn, "closed-old", "closed", old)
        active = await _session(conn, "active-old", "active", old)
        recent = await _session(conn, "closed-new", "closed", NOW - timedelta(days=20))
        policy = _policy(tmp_path, closed_session_months=12, dedupe_days=30)
        retention = Retention(store.db, policy)
        assert (await retention.plan()).counts["closed_sessions"] == 1
        report = await retention.once()
        assert report.counts["closed_sessions"] == 1 and not report.errors
        lines = [
            json.loads(line)
            for line in (tmp_path / "exports" / f"session-{closed}.jsonl").read_text().splitlines()
        ]
        assert lines[0]["session"]["id"] == closed
        assert [m["message"]["content"] for m in lines[1:]] == [
            "closed-old secret 1",
            "closed-old secret 2",
        ]
        assert lines[1]["message"]["annotations"][0]["content"] == "changed"
        # nothing of the session remains: its rows, its messages, their inbox payloads
        assert await conn.fetchval("SELECT count(*) FROM sessions WHERE id = $1", closed) == 0
        texts = await conn.fetch(
            "SELECT content FROM messages UNION ALL SELECT payload::text FROM inbound_events "
            "WHERE event_id LIKE 'closed-old%'"
        )
        assert not any("closed-old" in str(r[0]) for r in texts)
        remaining = {r["session_id"] for r in await conn.fetch("SELECT session_id FROM messages")}
        assert remaining == {active, recent}
        assert await conn.fetchval("SELECT count(*) FROM message_annotations") == 4
    finally:
        await store.close()
        await conn.close()


async def test_a_failing_step_is_counted_and_the_others_still_run(
    database_url: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(database_url)
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        await _session(conn, "closed-old", "closed", NOW - timedelta(days=400))
        await _insert(conn, "rejected-old", status="rejected", at=NOW - timedelta(days=100))
        (tmp_path / "exports").write_text("a file where the directory should be")
        policy = _policy(tmp_path, closed_session_months=12, dead_letter_days=90)
        retention = Retention(store.db, policy)
        report = await retention.once()
        assert set(report.errors) == {"closed_sessions"}
        assert report.counts["dead_letters"] == 1
        # not exported, so not deleted
        assert await conn.fetchval("SELECT count(*) FROM sessions WHERE status = 'closed'") == 1
        errors = retention.metrics.errors.labels("closed_sessions")._value.get()
        assert errors == 1
    finally:
        await store.close()
        await conn.close()


async def test_the_loop_runs_on_one_replica_only(database_url: str) -> None:
    stores = [await Store.connect(database_url, min_size=1, max_size=2) for _ in range(2)]
    replicas = [Retention(s.db, _policy(dead_letter_days=90), dsn=database_url) for s in stores]
    runs = [0, 0]
    fifth = asyncio.Event()
    for i, replica in enumerate(replicas):
        once = replica.once

        async def counted(now: datetime | None = None, i: int = i, once: Any = once) -> Report:
            runs[i] += 1
            if runs[i] >= 5:
                fifth.set()
            return await once(now)

        replica.once = counted  # type: ignore[method-assign]
    stopping = asyncio.Event()
    tasks = [asyncio.create_task(r.run(stopping)) for r in replicas]
    try:
        # the leader runs every 0.05 s; the other tries the lock as often meanwhile
        await fifth.wait()
        assert min(runs) == 0
    finally:
        stopping.set()
        await asyncio.gather(*tasks)
        for s in stores:
            await s.close()


async def test_cli_show_and_run_print_the_counts(database_url: str, tmp_path: Path) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await _insert(conn, "rejected-old", status="rejected", at=NOW - timedelta(days=100))
    finally:
        await conn.close()
    env = {"DATABASE_URL": database_url, "GATEWAY_DATA_DIR": str(tmp_path)}
    code, out, err = await run_cli_in_process(["retention", "show"], env)
    assert code == 0, err
    assert "dead_letters" in out and "kept 90 days" in out and "to remove: 1" in out
    code, out, err = await run_cli_in_process(["retention", "run", "--json"], env)
    assert code == 0, err
    assert json.loads(out)["counts"]["dead_letters"] == 1
    code, out, err = await run_cli_in_process(["retention", "show", "--json"], env)
    assert code == 0 and json.loads(out)["counts"]["dead_letters"] == 0


async def test_a_bad_retention_entry_exits_2_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "gateway.toml"
    for body, entry in (
        ("payload_days = -1", "[retention].payload_days"),
        ('dead_letter_days = "a week"', "[retention].dead_letter_days"),
        ("dedupe_days = 1", "[retention].dedupe_days"),
        ("keep_forever = true", "[retention].keep_forever"),
    ):
        config.write_text(f"[retention]\n{body}\n")
        env = {"GATEWAY_CONFIG_FILE": str(config), "GATEWAY_DATA_DIR": str(tmp_path)}
        code, _, err = await run_cli_in_process(["retention", "show"], env)
        assert code == 2 and entry in err, err
