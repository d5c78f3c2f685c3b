"""Group-committed ingest behaves exactly like ``Store.ingest``: same dedupe, same dense
seq numbers, same results, every caller answered only after its batch committed, and one bad
message does not fail the others."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from gateway.domain import Envelope, Rejected, ReplyTarget, Sender, SessionKey, Trigger
from gateway.errors import StoreError
from session_store.batching import IngestBatcher
from session_store.records import IngestResult
from session_store.store import Store


def envelope(
    n: int,
    *,
    thread: str = "t1",
    platform: str = "web",
    event_id: str | None = None,
    message_id: str | None = None,
    text: str | None = None,
    trigger: Trigger = Trigger.ALWAYS,
) -> Envelope:
    mid = message_id or f"m{n}"
    return Envelope(
        key=SessionKey(platform=platform, scope="local", chat_id="general", thread_id=thread),
        target=ReplyTarget(
            platform=platform,
            scope="local",
            chat_id="general",
            thread_id=thread,
            reply_to_message_id=mid,
        ),
        message_id=mid,
        event_id=event_id if event_id is not None else f"e{n}",
        text=text if text is not None else f"message {n}",
        sender=Sender(id="u1", name="Ada"),
        trigger=trigger,
    )


@pytest.fixture
async def batcher(store: Store) -> IngestBatcher:
    b = IngestBatcher(store, max_inflight=1)
    yield b  # type: ignore[misc]
    await b.close()


async def test_concurrent_ingests_into_one_session_get_dense_seq_numbers(
    store: Store, batcher: IngestBatcher
) -> None:
    results = await asyncio.gather(*(batcher.ingest(envelope(i), raw={"i": i}) for i in range(60)))
    assert {r.status for r in results} == {"accepted"}
    assert len({r.session_id for r in results}) == 1
    assert sorted(r.seq_no or 0 for r in results) == list(range(1, 61))
    # arrival order is kept within a session
    assert [r.seq_no for r in results] == list(range(1, 61))
    assert batcher.batches >= 1 and batcher.batched_messages >= 2  # really grouped
    session = await store.get_session(results[0].session_id or 0)
    assert session.last_seq_no == 60 and session.message_count == 60


async def test_duplicates_are_detected_within_and_across_batches(
    store: Store, batcher: IngestBatcher
) -> None:
    first = await asyncio.gather(
        batcher.ingest(envelope(1), raw={}),
        batcher.ingest(envelope(1), raw={}),  # same event twice in one batch
        batcher.ingest(envelope(1, event_id="other"), raw={}),  # same message, new event id
        batcher.ingest(envelope(2), raw={}),
    )
    assert [r.status for r in first] == ["accepted", "duplicate", "duplicate", "accepted"]
    assert [r.seq_no for r in first] == [1, None, None, 2]  # duplicates consume no seq_no
    again = await asyncio.gather(
        batcher.ingest(envelope(2), raw={}), batcher.ingest(envelope(3), raw={})
    )
    assert [r.status for r in again] == ["duplicate", "accepted"]
    assert again[1].seq_no == 3


async def test_results_and_rows_are_identical_to_unbatched(
    store: Store, batcher: IngestBatcher
) -> None:
    triggers = [Trigger.ALWAYS, Trigger.NEVER, Trigger.IF_FOLLOWING]

    def workload(platform: str) -> list[Envelope]:
        out = []
        for i in range(60):
            thread = f"t{i % 4}"
            trigger = triggers[(i // 4) % 3]
            out.append(envelope(i, thread=thread, platform=platform, trigger=trigger))
            if i % 7 == 0:  # a redelivery of the same event
                out.append(envelope(i, thread=thread, platform=platform, trigger=trigger))
            if i % 11 == 0:  # the same message under another event id
                out.append(envelope(i, thread=thread, platform=platform, event_id=f"x{i}"))
        return out

    # sessions t0 and t1 exist already and were answered: if_following asks there only
    for platform in ("web", "sink"):
        for thread in ("t0", "t1"):
            await store.ingest(envelope(1000, thread=thread, platform=platform), raw=None)
    async with store.connection() as conn:
        await conn.execute("UPDATE sessions SET answered = true WHERE thread_id IN ('t0', 't1')")

    plain = [await store.ingest(e, raw={"n": 1}) for e in workload("web")]
    batched = await asyncio.gather(*(batcher.ingest(e, raw={"n": 1}) for e in workload("sink")))
    assert batcher.batches >= 1

    def shape(r: IngestResult) -> tuple[object, ...]:
        return (r.status, r.seq_no, r.turn_requested, r.reason)

    assert [shape(r) for r in batched] == [shape(r) for r in plain]
    assert {r.turn_requested for r in plain} == {True, False}
    for thread in ("t0", "t1", "t2", "t3"):
        a = await store.find_session(
            SessionKey(platform="web", scope="local", chat_id="general", thread_id=thread)
        )
        b = await store.find_session(
            SessionKey(platform="sink", scope="local", chat_id="general", thread_id=thread)
        )
        assert a is not None and b is not None
        rows_a = await store.recent(a.id, 100)
        rows_b = await store.recent(b.id, 100)
        assert [(m.seq_no, m.content, m.trigger) for m in rows_a] == [
            (m.seq_no, m.content, m.trigger) for m in rows_b
        ]
        assert (a.last_seq_no, a.message_count) == (b.last_seq_no, b.message_count)


async def test_every_caller_is_answered_only_after_its_message_is_committed(
    store: Store, batcher: IngestBatcher, database_url: str
) -> None:
    observer = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    assert observer is not None
    missing: list[int] = []

    async def one(n: int) -> None:
        result = await batcher.ingest(envelope(n, thread=f"t{n % 5}"), raw={})
        assert result.status == "accepted"
        # another connection sees the row the moment its caller is answered
        found = await observer.fetchval(
            "SELECT count(*) FROM messages WHERE id = $1", result.message_id
        )
        if found != 1:
            missing.append(n)

    try:
        await asyncio.gather(*(one(n) for n in range(40)))
    finally:
        await observer.close()
    assert missing == []
    assert batcher.batches >= 1


async def test_a_failing_message_does_not_fail_the_others(
    store: Store, batcher: IngestBatcher
) -> None:
    # PostgreSQL text cannot hold NUL: this statement fails inside the batch's transaction
    bad = envelope(5, text="broken \x00 text")
    calls = [batcher.ingest(envelope(i), raw={}) for i in range(5)]
    calls.append(batcher.ingest(bad, raw={}))
    calls += [batcher.ingest(envelope(i), raw={}) for i in range(6, 10)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(results[5], StoreError)
    good = [r for r in results if isinstance(r, IngestResult)]
    assert len(good) == 9 and {r.status for r in good} == {"accepted"}
    assert sorted(r.seq_no or 0 for r in good) == list(range(1, 10))  # still dense


async def test_non_message_events_go_through_unchanged(
    store: Store, batcher: IngestBatcher
) -> None:
    rejected = Rejected(platform="web", reason="bad body", event_id="r1")
    assert (await batcher.ingest(rejected, raw={})).status == "rejected"
    assert (await batcher.ingest(rejected, raw={})).status == "duplicate"


async def test_a_lone_caller_is_not_batched_and_close_refuses_new_work(
    store: Store, batcher: IngestBatcher
) -> None:
    result = await batcher.ingest(envelope(1), raw={})
    assert result.status == "accepted" and batcher.batches == 0
    await batcher.close()
    with pytest.raises(StoreError):
        await batcher.ingest(envelope(2), raw={})


async def test_no_caller_is_left_waiting_between_waves(
    store: Store, batcher: IngestBatcher
) -> None:
    # callers arriving just as a flush loop finds nothing left must still be served
    async def wave(w: int) -> list[IngestResult]:
        return await asyncio.gather(
            *(batcher.ingest(envelope(w * 10 + i, thread=f"w{i}"), raw=None) for i in range(3))
        )

    async def waves() -> None:
        for w in range(150):
            await wave(w)
            await asyncio.sleep(0)  # let the previous flush loop wind down meanwhile

    await asyncio.wait_for(waves(), timeout=30)


async def test_concurrent_batches_and_single_ingests_keep_every_session_dense(
    store: Store,
) -> None:
    # two batch statements in flight at once, plus unbatched ingests, on the same few
    # sessions, with redeliveries racing their originals: no deadlock, no gap, no double
    batcher = IngestBatcher(store, max_inflight=2, max_batch=16)
    try:
        calls = []
        for i in range(240):
            env = envelope(i, thread=f"t{i % 5}")
            calls.append(batcher.ingest(env, raw=None))
            if i % 3 == 0:
                calls.append(store.ingest(envelope(i, thread=f"t{i % 5}"), raw=None))
            if i % 10 == 0:
                calls.append(batcher.ingest(envelope(i, thread=f"t{i % 5}"), raw=None))
        results = await asyncio.gather(*calls)
    finally:
        await batcher.close()
    accepted = [r for r in results if r.status == "accepted"]
    assert len(accepted) == 240  # each message stored exactly once
    assert batcher.batches >= 2
    for thread in range(5):
        key = SessionKey(platform="web", scope="local", chat_id="general", thread_id=f"t{thread}")
        session = await store.find_session(key)
        assert session is not None
        seqs = [m.seq_no for m in await store.recent(session.id, 100)]
        assert seqs == list(range(1, 49))
        assert session.last_seq_no == 48
