"""Fencing: a worker that stalled while its claim was taken over writes nothing: not its
turn's answer, not its delivery's outcome; and a delivery's lease is renewed while it waits
for pacing, so its loss is noticed before anything is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from benchmarks.fakes.sink import SinkTransport, sink_envelope
from benchmarks.fakes.sink_server import SinkServer
from gateway.delivery import DeliverySettings, DeliveryWorker
from gateway.domain import ReplyTarget
from gateway.errors import LeaseLost
from gateway.hub import Signal
from gateway.intake import to_inbound
from gateway.metrics import Metrics
from gateway.pacing import pace_rules
from session_store.records import DeliveryRecord, OutgoingReply
from session_store.store import Store

TARGET = ReplyTarget(platform="sink", scope="test", chat_id="c", thread_id="t")


class PacedSink(SinkTransport):
    def pace(self, target: ReplyTarget) -> Sequence[tuple[str, float]]:
        return [("chat:c", 2.0)]


async def _expire(store: Store, table: str, column: str, row_id: int) -> None:
    async with store.db.connection() as conn:
        await conn.execute(
            f"UPDATE {table} SET {column} = now() - interval '1 second' WHERE id = $1", row_id
        )


async def _delivery(store: Store, *, lease: float, handed: bool = False) -> DeliveryRecord:
    """A delivery in flight: claimed from the table, or (``handed``) handed over claimed by
    the statement that finished its turn (issue 17)."""
    await store.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": "t", "id": "1", "text": "q"})), raw=None
    )
    claim = await store.claim_turn(lease_seconds=30)
    assert claim is not None
    done = await store.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="a", parts=["a"])],
        target=TARGET,
        hand_over=handed,
        lease_seconds=lease,
    )
    if handed:
        [row] = done.handed
        return row
    [row] = await store.claim_deliveries(platforms=["sink"], lease_seconds=lease)
    return row


async def test_a_stalled_turn_whose_lease_was_taken_over_cannot_write_its_answer(
    store: Store,
) -> None:
    await store.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": "t", "id": "1", "text": "q"})), raw=None
    )
    stalled = await store.claim_turn(lease_seconds=30)
    assert stalled is not None
    await _expire(store, "sessions", "turn_lease_until", stalled.session_id)
    taker = await store.claim_turn(lease_seconds=30)
    assert taker is not None and taker.owner != stalled.owner
    with pytest.raises(LeaseLost):
        await store.finish_turn(
            stalled,
            handled_seq=1,
            replies=[OutgoingReply(content="late", parts=["late"])],
            target=TARGET,
        )
    assert [m.content for m in await store.recent(stalled.session_id)] == ["q"]
    await store.finish_turn(
        taker, handled_seq=1, replies=[OutgoingReply(content="a", parts=["a"])], target=TARGET
    )
    assert [m.content for m in await store.recent(stalled.session_id)] == ["q", "a"]


async def test_a_stalled_delivery_whose_claim_was_taken_over_cannot_send_or_mark_it(
    store: Store, sink: SinkServer
) -> None:
    stalled = await _delivery(store, lease=0.6)
    transport = PacedSink(sink.url)
    worker = DeliveryWorker(
        store,
        {"sink": transport},
        metrics=Metrics(),
        wake=Signal(),
        settings=DeliverySettings(lease_seconds=0.6),
    )
    # the chat's previous send was just now: this one waits ~2 s for its pacing slot
    await worker._budget.reserve(pace_rules(transport, TARGET))
    delivering = asyncio.create_task(worker.deliver(stalled))
    # meanwhile its claim is taken over (lease expired, recovered, claimed again)
    await _expire(store, "deliveries", "lease_until", stalled.id)
    assert await store.recover_expired_sends(idempotent_platforms=["sink"], other_platforms=[]) == (
        1,
        0,
    )
    [taker] = await store.claim_deliveries(platforms=["sink"], lease_seconds=30)
    assert taker.id == stalled.id and taker.claim_token != stalled.claim_token

    # the next lease renewal finds the claim gone: the paced send is cancelled, not made
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(delivering, 5)
    assert sink.received == []
    # and none of the stalled claim's writes land
    with pytest.raises(LeaseLost):
        await store.mark_sent(stalled, "late-id")
    with pytest.raises(LeaseLost):
        await store.mark_retry(stalled, delay=1, error="late")
    with pytest.raises(LeaseLost):
        await store.mark_failed(stalled, "late", ambiguous=True)
    [row] = await store.deliveries_for_session(stalled.session_id)
    assert (row.status, row.claim_token, row.platform_message_id, row.ambiguous) == (
        "sending",
        taker.claim_token,
        None,
        False,
    )
    await store.mark_sent(taker, "real-id")
    [row] = await store.deliveries_for_session(stalled.session_id)
    assert (row.status, row.platform_message_id) == ("sent", "real-id")
    await transport.aclose()


async def test_a_live_delivery_keeps_its_lease_while_it_waits_for_pacing(
    store: Store, sink: SinkServer
) -> None:
    delivery = await _delivery(store, lease=0.6)
    transport = PacedSink(sink.url)
    worker = DeliveryWorker(
        store,
        {"sink": transport},
        metrics=Metrics(),
        wake=Signal(),
        settings=DeliverySettings(lease_seconds=0.6),
    )
    await worker._budget.reserve(pace_rules(transport, TARGET))
    delivering = asyncio.create_task(worker.deliver(delivery))
    # recovery runs repeatedly during the ~2 s wait: the renewed lease never expires
    for _ in range(8):
        assert await store.recover_expired_sends(
            idempotent_platforms=[], other_platforms=["sink"]
        ) == (0, 0)
        await asyncio.sleep(0.25)
    await asyncio.wait_for(delivering, 5)
    [row] = await store.deliveries_for_session(delivery.session_id)
    assert row.status == "sent" and not row.ambiguous
    assert len(sink.accepted) == 1
    await transport.aclose()


async def _dead_process_send(store: Store, *, handed: bool = False) -> DeliveryRecord:
    """A delivery in flight (``sending``) whose process has died: it took its liveness lock
    in this server lifetime (``gateway_processes``) and holds it no more."""
    async with store.db.connection() as conn:
        await conn.execute(
            "INSERT INTO gateway_processes (id, server_started_at)"
            " VALUES (424242, pg_postmaster_start_time())"
        )
    store.process_id = 424242
    try:
        return await _delivery(store, lease=30, handed=handed)
    finally:
        store.process_id = None


@pytest.mark.parametrize("handed", [False, True], ids=["claimed", "handed-over"])
async def test_a_send_of_a_dead_process_within_the_platforms_key_window_is_resent_not_ambiguous(
    store: Store, handed: bool
) -> None:
    """Campaign finding (issue 12): a Mattermost reply whose replica was SIGKILLed mid-send
    was failed as ambiguous although its pending_post_id was still remembered by the server,
    so the person never got the answer. Found seconds after its claim, it is resent; the
    same for a first part handed over by the turn's finish (it records its claim time too)."""
    row = await _dead_process_send(store, handed=handed)
    requeued, failed = await store.recover_expired_sends(
        idempotent_platforms=[], other_platforms=[], windowed_platforms={"sink": 20.0}
    )
    assert (requeued, failed) == (1, 0)
    [again] = await store.claim_deliveries(platforms=["sink"], lease_seconds=30)
    assert again.id == row.id and not again.ambiguous


async def test_a_send_of_a_dead_process_older_than_the_key_window_stays_ambiguous(
    store: Store,
) -> None:
    row = await _dead_process_send(store)
    await _expire(store, "deliveries", "claimed_at", row.id)  # claimed 1 s ago
    requeued, failed = await store.recover_expired_sends(
        idempotent_platforms=[], other_platforms=[], windowed_platforms={"sink": 0.5}
    )
    assert (requeued, failed) == (0, 1)
    assert await store.claim_deliveries(platforms=["sink"], lease_seconds=30) == []
