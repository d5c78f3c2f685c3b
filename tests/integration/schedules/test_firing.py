"""Schedules against a real PostgreSQL and a real in-process gateway: each firing once across
concurrent firing loops, the missed-firing policy, a firing's answer landing in its thread,
and a schedule paused after five failed firings with its owner told in the place."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from prometheus_client import generate_latest

from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import RequestError
from gateway.core.plugins import place_target
from gateway.schedules.service import ScheduleService
from gateway.schedules.worker import PAUSE_AFTER
from session_store.repos.schedules import Schedules
from session_store.store import Store
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

PLACE = SessionKey(platform="sink", scope="test", chat_id="c1", thread_id="t1")


def _target(key: SessionKey) -> ReplyTarget:
    return place_target(key)


async def _rows(database_url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def test_two_concurrent_firing_loops_fire_each_due_schedule_once(
    database_url: str, store: Store
) -> None:
    now = datetime.now(UTC)
    service = ScheduleService(Schedules(store.db), targets=_target, clock=lambda: now)
    for n in range(120):
        key = SessionKey(platform="sink", scope="test", chat_id=f"c{n % 7}", thread_id=str(n))
        await service.repo.add(
            key=key,
            prompt=f"q{n}",
            owner="operator",
            time_zone="UTC",
            fire_at=now - timedelta(seconds=n % 30),
            cron=None,
            next_fire_at=now - timedelta(seconds=n % 30),
        )
    other = await Store.connect(database_url, min_size=1, max_size=4)
    try:
        second = ScheduleService(Schedules(other.db), targets=_target, clock=lambda: now)

        async def drain(s: ScheduleService) -> int:
            total = 0
            while fired := await s.repo.fire_due(s.decide, now=now, limit=10):
                total += len(fired)
            return total

        counts = await asyncio.gather(drain(service), drain(second))
    finally:
        await other.close()
    assert sum(counts) == 120
    firings = await _rows(database_url, "SELECT schedule_id FROM schedule_firings")
    assert len({r[0] for r in firings}) == len(firings) == 120
    asked = await _rows(
        database_url, "SELECT metadata FROM messages WHERE role = 'system' ORDER BY id"
    )
    assert len(asked) == 120
    assert all("schedule_id" in r[0] and r[0]["owner"] == "operator" for r in asked)
    done = await _rows(database_url, "SELECT DISTINCT status FROM schedules")
    assert [r[0] for r in done] == ["done"]


async def test_a_firing_missed_by_an_hour_is_skipped_and_a_week_down_skips_once(
    store: Store, database_url: str
) -> None:
    now = datetime(2026, 12, 3, 22, 0, tzinfo=UTC)
    service = ScheduleService(Schedules(store.db), targets=_target, clock=lambda: now)
    week = now - timedelta(days=7)
    daily = await service.repo.add(
        key=PLACE,
        prompt="digest",
        owner="o",
        time_zone="UTC",
        fire_at=None,
        cron="0 21 * * *",
        next_fire_at=week,
    )
    recent = await service.repo.add(
        key=PLACE,
        prompt="reminder",
        owner="o",
        time_zone="UTC",
        fire_at=now - timedelta(minutes=30),
        cron=None,
        next_fire_at=now - timedelta(minutes=30),
    )
    fired = await service.repo.fire_due(service.decide, now=now)
    assert sorted((f.schedule.id, f.action) for f in fired) == [
        (daily.id, "skip"),
        (recent.id, "fire"),
    ]
    assert await service.repo.fire_due(service.decide, now=now) == []  # nothing twice
    after = await service.get(daily.id)
    assert after.next_fire_at == datetime(2026, 12, 4, 21, 0, tzinfo=UTC)
    assert after.last_outcome == "skipped"
    firings = await service.repo.firings(daily.id)
    assert [(f.outcome, f.session_id) for f in firings] == [("skipped", None)]


async def test_a_firing_lands_once_in_its_thread_and_is_settled_as_sent(
    database_url: str, sink: SinkServer
) -> None:
    async with running_gateway(
        database_url, adapters=[SinkAdapter(sink.url)], web_chat=False
    ) as gw:
        made = await gw.schedules.create(
            PLACE, prompt="what is due today?", at=datetime.now(UTC) + timedelta(seconds=1)
        )
        await wait_for(lambda: sink.texts_in("c1", "t1"), timeout=20)
        await wait_for(lambda: _settled(gw.schedules, made.id), timeout=20, message="settled")
        assert sink.texts_in("c1", "t1") == ["echo: what is due today?"]
        assert (await gw.schedules.get(made.id)).status == "done"
        exposed = generate_latest(gw.metrics.registry).decode()
        assert 'gateway_schedule_firings_total{outcome="sent"} 1.0' in exposed
        assert "gateway_schedule_lateness_seconds_count 1.0" in exposed
    rows = await _rows(
        database_url, "SELECT role, sender_id, metadata FROM messages ORDER BY session_id, seq_no"
    )
    assert [r[0] for r in rows] == ["system", "assistant"]
    assert rows[0][2]["schedule_id"] == made.id


async def test_two_firings_due_together_in_one_place_get_an_answer_each(
    database_url: str, sink: SinkServer
) -> None:
    """A firing is a turn of its own: two due at the same instant in one thread are two
    questions and two answers (before, one answer took both)."""
    async with running_gateway(
        database_url, adapters=[SinkAdapter(sink.url)], web_chat=False
    ) as gw:
        due = datetime.now(UTC) + timedelta(seconds=2)
        first = await gw.schedules.create(PLACE, prompt="post the checklist", at=due)
        second = await gw.schedules.create(PLACE, prompt="anything blocking?", at=due)
        await wait_for(lambda: len(sink.texts_in("c1", "t1")) >= 2, timeout=30)
        await wait_for(lambda: _settled(gw.schedules, first.id), timeout=20, message="settled")
        await wait_for(lambda: _settled(gw.schedules, second.id), timeout=20, message="settled")
        await asyncio.sleep(0.5)  # a third answer would be a bug: give it the time to show
        # in the order they fired, each answering its own question only
        questions = [r[1] for r in await _rows(database_url, _MESSAGES) if r[0] == "system"]
        assert sink.texts_in("c1", "t1") == [f"echo: {q}" for q in questions]
    rows = await _rows(database_url, _MESSAGES)
    assert [r[0] for r in rows] == ["system", "system", "assistant", "assistant"]
    assert sorted(r[1] for r in rows[:2]) == ["anything blocking?", "post the checklist"]


_MESSAGES = "SELECT role, content FROM messages ORDER BY session_id, seq_no"


async def _settled(service: ScheduleService, schedule_id: int) -> bool:
    return (await service.get(schedule_id)).last_outcome == "sent"


async def test_five_failed_firings_in_a_row_pause_the_schedule_and_tell_the_owner_there(
    database_url: str, sink: SinkServer
) -> None:
    sink.script.extend([("400", "refused by the platform")] * PAUSE_AFTER)
    async with running_gateway(
        database_url, adapters=[SinkAdapter(sink.url)], web_chat=False
    ) as gw:
        made = await gw.schedules.create(
            PLACE, prompt="ping", cron="* * * * * *", owner="sink:test:alice"
        )

        async def paused() -> bool:
            return (await gw.schedules.get(made.id)).status == "paused"

        await wait_for(paused, timeout=40, message="paused after five failures")
        await wait_for(lambda: sink.texts_in("c1", "t1"), timeout=20, message="the notice")
        after = await gw.schedules.get(made.id)
        assert after.failures == PAUSE_AFTER
        assert after.paused_reason is not None and "refused by the platform" in after.paused_reason
        notice = sink.texts_in("c1", "t1")
        assert len(notice) == 1 and f"Schedule {made.id}" in notice[0] and "paused" in notice[0]


async def test_a_schedule_that_no_longer_reads_is_skipped_and_ends_without_blocking_others(
    store: Store,
) -> None:
    now = datetime(2026, 12, 3, 22, 0, tzinfo=UTC)
    service = ScheduleService(Schedules(store.db), targets=_target, clock=lambda: now)
    broken = await service.repo.add(
        key=PLACE,
        prompt="x",
        owner="o",
        time_zone="Gone/Nowhere",
        fire_at=None,
        cron="0 9 * * *",
        next_fire_at=now - timedelta(minutes=1),
    )
    fine = await service.repo.add(
        key=PLACE,
        prompt="y",
        owner="o",
        time_zone="UTC",
        fire_at=now,
        cron=None,
        next_fire_at=now,
    )
    fired = await service.repo.fire_due(service.decide, now=now)
    assert sorted((f.schedule.id, f.action) for f in fired) == [
        (broken.id, "skip"),
        (fine.id, "fire"),
    ]
    [skipped] = await service.repo.firings(broken.id)
    assert skipped.reason is not None and "Gone/Nowhere" in skipped.reason
    assert (await service.get(broken.id)).status == "done"


async def test_people_cancel_their_own_operators_any_and_run_fires_now_once(
    store: Store,
) -> None:
    now = datetime.now(UTC)
    service = ScheduleService(Schedules(store.db), targets=_target, clock=lambda: now)
    mine = await service.create(
        PLACE, prompt="weekly summary", cron="0 9 * * 1", owner="sink:test:alice"
    )
    with pytest.raises(RequestError, match="not yours") as refused:
        await service.cancel(mine.id, by="sink:test:bob")
    assert refused.value.status == 403
    fired = await service.run(mine.id)
    assert fired.action == "fire" and fired.seq_no == 1
    after = await service.get(mine.id)
    assert after.next_fire_at == mine.next_fire_at  # its regular firings stay as they were
    assert (await service.cancel(mine.id, by="sink:test:alice")).id == mine.id
    other = await service.create(PLACE, prompt="x", at=now + timedelta(hours=1), owner="bob")
    assert (await service.cancel(other.id)).id == other.id  # an operator: any
    with pytest.raises(RequestError) as gone:
        await service.cancel(other.id)
    assert gone.value.status == 404
