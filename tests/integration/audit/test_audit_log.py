"""The audit log itself: append-only in the database, month partitions made ahead and dropped
after the retention, a recorder that never breaks the action, and the three ways to read it
(GET /api/v1/audit with filters and a cursor, /ops/audit, ``gateway audit``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest
import structlog

from gateway import audit
from gateway.audit.maintenance import AHEAD_MONTHS, AuditMaintenance
from session_store.repos.audit import AuditStore, NewEvent
from session_store.store import Store
from testsupport.harness import running_gateway
from testsupport.process import run_cli

TOKEN = "audit-token-0123456789abcdef0123456789"


async def _partitions(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'audit_events'::regclass ORDER BY 1"
    )
    return [r["relname"] for r in rows]


async def test_rows_cannot_be_changed_or_deleted(database_url: str) -> None:
    store = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        assert await audit.record(store, "test.thing", ("thing", 1), actor="system")
    finally:
        await store.close()
    conn = await asyncpg.connect(database_url)
    try:
        for statement in (
            "UPDATE audit_events SET actor = 'someone else'",
            "DELETE FROM audit_events",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="append-only"):
                await conn.execute(statement)
        assert await conn.fetchval("SELECT actor FROM audit_events") == "system"
    finally:
        await conn.close()


async def test_partitions_are_made_ahead_and_old_months_dropped(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("SELECT audit_ensure_partitions('2020-01-15', 1)")
        await conn.execute(
            "INSERT INTO audit_events (at, actor, action, outcome, surface) "
            "VALUES ('2020-01-20', 'system', 'old.thing', 'ok', 'system'), "
            "('2020-02-20', 'system', 'old.thing', 'ok', 'system')"
        )
        store = await Store.connect(database_url, min_size=1, max_size=2)
        try:
            upkeep = AuditMaintenance(store.db, retention_days=30)
            now = datetime(2020, 3, 10, tzinfo=UTC)  # 30 days back: 9 Feb
            assert await upkeep.once(now) == ["audit_events_2020_01"]
            # February is not wholly past the cutoff: kept
            assert await conn.fetchval("SELECT count(*) FROM audit_events") == 1
            assert await upkeep.once() == ["audit_events_2020_02"]
            names = await _partitions(conn)
            this_month = datetime.now(UTC).replace(day=1)
            expected = []
            for _ in range(AHEAD_MONTHS + 1):
                expected.append(f"audit_events_{this_month:%Y_%m}")
                this_month = (this_month + timedelta(days=32)).replace(day=1)
            assert names == expected
            # 0: keep everything
            assert await AuditMaintenance(store.db, retention_days=0).once() == []
        finally:
            await store.close()
    finally:
        await conn.close()


async def test_a_month_without_its_partition_gets_one_on_the_spot(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"DROP TABLE audit_events_{datetime.now(UTC):%Y_%m}")
        store = await Store.connect(database_url, min_size=1, max_size=2)
        try:
            stored = await AuditStore(store.db).append(NewEvent(actor="system", action="a.b"))
            assert stored.action == "a.b"
        finally:
            await store.close()
    finally:
        await conn.close()


async def test_a_failed_write_never_breaks_the_action_and_is_logged(database_url: str) -> None:
    store = await Store.connect(database_url, min_size=1, max_size=2)
    await store.close()  # the database is gone for this recorder
    with structlog.testing.capture_logs() as logs:
        assert not await audit.record(
            store, "kb.document.delete", ("kb.document", 7), actor="admin:token"
        )
    [failed] = [e for e in logs if e["event"] == "audit_record_failed"]
    assert failed["action"] == "kb.document.delete" and failed["object_id"] == "7"
    assert failed["actor"] == "admin:token"


async def test_the_same_transaction_decides_for_action_and_event(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await audit.record(conn, "test.kept", actor="system")
        with pytest.raises(RuntimeError):
            async with conn.transaction():
                await audit.record(conn, "test.rolled_back", actor="system")
                raise RuntimeError("the action failed")
        actions = [r["action"] for r in await conn.fetch("SELECT action FROM audit_events")]
        assert actions == ["test.kept"]
    finally:
        await conn.close()


async def test_the_api_filters_and_pages_and_the_page_and_cli_show_it(
    database_url: str,
) -> None:
    async with running_gateway(database_url, GATEWAY_ADMIN_TOKEN=TOKEN) as gw:
        for n in range(5):
            await audit.record(gw.store, "kb.document.add", ("kb.document", n), actor="cli:ann")
        await audit.record(gw.store, "web.sign_in", ("web.account", "bo"), actor="web:bo")
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=gw.url, headers=auth) as c:
            first = (await c.get("/api/v1/audit", params={"action": "kb", "limit": 3})).json()
            assert [e["object_id"] for e in first["items"]] == ["4", "3", "2"]
            rest = await c.get(
                "/api/v1/audit",
                params={"action": "kb", "limit": 3, "cursor": first["next_cursor"]},
            )
            assert [e["object_id"] for e in rest.json()["items"]] == ["1", "0"]
            assert rest.json()["next_cursor"] is None
            by_actor = (await c.get("/api/v1/audit", params={"actor": "web:bo"})).json()
            assert [e["action"] for e in by_actor["items"]] == ["web.sign_in"]
            future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
            later = await c.get("/api/v1/audit", params={"since": future})
            assert later.json()["items"] == []
            earlier = await c.get("/api/v1/audit", params={"until": future, "limit": 500})
            assert len(earlier.json()["items"]) == 6
            assert (await c.get("/api/v1/audit", params={"cursor": "junk"})).status_code == 422
            naive = await c.get("/api/v1/audit", params={"since": "2026-01-01T00:00:00"})
            assert naive.status_code == 422 and "time zone" in naive.json()["detail"]
            # reading needs the token like the rest of the admin API
            assert (await c.get("/api/v1/audit", headers={"Authorization": ""})).status_code == 401
            page = await c.get("/ops/audit")
            assert page.status_code == 200 and "audit-rows" in page.text
            script = await c.get("/ops/audit/audit.js")
            assert "/api/v1/audit" in script.text and ".innerHTML" not in script.text
        env = {"DATABASE_URL": gw.settings.database_url or ""}
        code, out, err = await run_cli(["audit", "--since", "1h", "--json"], env)
        assert code == 0, err
        events = json.loads(out)
        assert [e["action"] for e in events] == ["web.sign_in"] + ["kb.document.add"] * 5
        # nothing matches: an empty array, not a sentence a script cannot read
        code, out, _ = await run_cli(["audit", "--action", "nothing.like.this", "--json"], env)
        assert code == 0 and json.loads(out) == []
        code, out, _ = await run_cli(["audit", "--action", "web", "--actor", "web:bo"], env)
        assert code == 0 and out.count("\n") == 1 and "web.sign_in" in out
