"""Fencing: a worker that stalled while its claim was taken over writes nothing: not its
turn's answer, not its delivery's outcome; a delivery waiting for pacing keeps its claim (the
wait's mark carries its lease past the wait) and one on the wire keeps it by renewal, so its
loss is noticed before anything is sent."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gateway.core.domain import ReplyTarget
from gateway.core.errors import LeaseLost
from gateway.core.hub import Signal
from gateway.core.metrics import Metrics
from gateway.core.ports import PaceRule
from gateway.inbound.intake import to_inbound
from gateway.outbox.delivery import DeliverySettings, DeliveryWorker
from gateway.outbox.pacing import pace_rules
from session_store.records import DeliveryRecord, OutgoingReply
from session_store.store import Store
from testsupport.fakes.sink import SinkTransport, sink_envelope
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for

TARGET = ReplyTarget(platform="sink", scope="test", chat_id="c", thread_id="t")


class PacedSink(SinkTransport):
    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        return [PaceRule("chat:c", 1.0)]


async def _expire(store: Store, table: str, column: str, row_id: int) -> None:
    async with store.db.connection() as conn:
        await conn.execute(
            f"UPDATE {table} SET {column} = now() - interval '1 second' WHERE id = $1", row_id
        )


async def _pacing_marked(store: Store, delivery_id: int) -> bool:
    """The claim says it is waiting for pacing (nothing on the wire; migration 0014)."""
    async with store.db.connection() as conn:
        return bool(
            await conn.fetchval(
                "SELECT pacing_until IS NOT NULL FROM deliveries WHERE id = $1", delivery_id
            )
        )


async def _delivery(
    store: Store, *, lease: float, handed: bool = False, thread: str = "t"
) -> DeliveryRecord:
    """A delivery in flight: claimed from the table, or (``handed``) handed over claimed by
    the statement that finished its turn."""
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": thread, "id": f"{thread}1", "text": "q"})),
        raw=None,
    )
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None
    done = await store.outbox.finish_turn_outbox(
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
    [row] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=lease)
    return row


def _worker(store: Store, transport: SinkTransport) -> DeliveryWorker:
    """A delivery worker whose leases last 0.6 s (its renewals every 0.2 s)."""
    return DeliveryWorker(
        store,
        {"sink": transport},
        metrics=Metrics(),
        wake=Signal(),
        settings=DeliverySettings(lease_seconds=0.6),
    )


async def _never_taken_then_sent(
    store: Store, sink: SinkServer, delivery: DeliveryRecord, delivering: asyncio.Task[bool]
) -> None:
    """Recovery, run five times over about 1.25 s (twice the lease), takes nothing from the
    live worker; then its send is recorded once, sent and not ambiguous."""
    for _ in range(5):
        assert await store.outbox.recover_expired_sends(
            idempotent_platforms=[], other_platforms=["sink"]
        ) == (0, 0)
        await asyncio.sleep(0.25)
    await asyncio.wait_for(delivering, 5)
    [row] = await store.outbox.deliveries_for_session(delivery.session_id)
    assert row.status == "sent" and not row.ambiguous
    assert len(sink.accepted) == 1


async def test_a_stalled_turn_whose_lease_was_taken_over_cannot_write_its_answer(
    store: Store,
) -> None:
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": "t", "id": "1", "text": "q"})), raw=None
    )
    stalled = await store.turns.claim_turn(lease_seconds=30)
    assert stalled is not None
    await _expire(store, "sessions", "turn_lease_until", stalled.session_id)
    taker = await store.turns.claim_turn(lease_seconds=30)
    assert taker is not None and taker.owner != stalled.owner
    with pytest.raises(LeaseLost):
        await store.outbox.finish_turn_outbox(
            stalled,
            handled_seq=1,
            replies=[OutgoingReply(content="late", parts=["late"])],
            target=TARGET,
        )
    assert [m.content for m in await store.sessions.recent(stalled.session_id)] == ["q"]
    await store.outbox.finish_turn_outbox(
        taker, handled_seq=1, replies=[OutgoingReply(content="a", parts=["a"])], target=TARGET
    )
    assert [m.content for m in await store.sessions.recent(stalled.session_id)] == ["q", "a"]


async def test_a_stalled_delivery_whose_claim_was_taken_over_cannot_send_or_mark_it(
    store: Store, sink: SinkServer
) -> None:
    stalled = await _delivery(store, lease=0.6)
    transport = PacedSink(sink.url)
    worker = _worker(store, transport)
    # the chat's previous send was just now: this one waits ~1 s for its pacing slot
    await worker._budget.reserve(pace_rules(transport, TARGET))
    delivering = asyncio.create_task(worker.deliver(stalled))
    await wait_for(lambda: _pacing_marked(store, stalled.id), timeout=5)
    # meanwhile its claim is taken over (lease expired, recovered, claimed again)
    await _expire(store, "deliveries", "lease_until", stalled.id)
    assert await store.outbox.recover_expired_sends(
        idempotent_platforms=["sink"], other_platforms=[]
    ) == (
        1,
        0,
    )
    [taker] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=30)
    assert taker.id == stalled.id and taker.claim_token != stalled.claim_token

    # the next lease renewal finds the claim gone: the paced send is cancelled, not made
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(delivering, 5)
    assert sink.received == []
    # and none of the stalled claim's writes land
    with pytest.raises(LeaseLost):
        await store.outbox.mark_sent(stalled, "late-id")
    with pytest.raises(LeaseLost):
        await store.outbox.mark_retry(stalled, delay=1, error="late")
    with pytest.raises(LeaseLost):
        await store.outbox.mark_failed(stalled, "late", ambiguous=True)
    [row] = await store.outbox.deliveries_for_session(stalled.session_id)
    assert (row.status, row.claim_token, row.platform_message_id, row.ambiguous) == (
        "sending",
        taker.claim_token,
        None,
        False,
    )
    await store.outbox.mark_sent(taker, "real-id")
    [row] = await store.outbox.deliveries_for_session(stalled.session_id)
    assert (row.status, row.platform_message_id) == ("sent", "real-id")
    await transport.aclose()


async def test_a_live_delivery_keeps_its_lease_while_it_waits_for_pacing(
    store: Store, sink: SinkServer
) -> None:
    delivery = await _delivery(store, lease=0.6)
    transport = PacedSink(sink.url)
    worker = _worker(store, transport)
    await worker._budget.reserve(pace_rules(transport, TARGET))
    delivering = asyncio.create_task(worker.deliver(delivery))
    # recovery runs repeatedly during the ~1 s wait (longer than the 0.6 s lease): the wait's
    # mark keeps the lease past it, so the claim is never taken (renewal on the wire is the
    # next test's)
    await _never_taken_then_sent(store, sink, delivery, delivering)
    await transport.aclose()


async def test_a_live_send_keeps_its_lease_while_the_platform_holds_its_answer(
    store: Store, sink: SinkServer
) -> None:
    """Renewal on the wire: the platform answers after 1.5 s and the lease is 0.6 s. Only the
    renewals keep the claim (a pacing wait is covered by its mark, above; this is not), so
    recovery, run repeatedly meanwhile, never fails as ambiguous a send a live worker is
    still making, and the send is recorded once."""
    delivery = await _delivery(store, lease=0.6)
    sink.script.append(("timeout", 1.5))
    transport = SinkTransport(sink.url)
    worker = _worker(store, transport)
    delivering = asyncio.create_task(worker.deliver(delivery))
    await wait_for(lambda: len(sink.received) == 1, timeout=5)
    await _never_taken_then_sent(store, sink, delivery, delivering)
    await transport.aclose()


async def _dead_process_send(
    store: Store, *, handed: bool = False, thread: str = "t"
) -> DeliveryRecord:
    """A delivery in flight (``sending``) whose process has died: it took its liveness lock
    in this server lifetime (``gateway_processes``) and holds it no more."""
    async with store.db.connection() as conn:
        await conn.execute(
            "INSERT INTO gateway_processes (id, server_started_at)"
            " VALUES (424242, pg_postmaster_start_time()) ON CONFLICT DO NOTHING"
        )
    store.process_id = 424242
    try:
        return await _delivery(store, lease=30, handed=handed, thread=thread)
    finally:
        store.process_id = None


@pytest.mark.parametrize("handed", [False, True], ids=["claimed", "handed-over"])
async def test_a_send_of_a_dead_process_within_the_platforms_key_window_is_resent_not_ambiguous(
    store: Store, handed: bool
) -> None:
    """Campaign finding: a Mattermost reply whose replica was SIGKILLed mid-send
    was failed as ambiguous although its pending_post_id was still remembered by the server,
    so the person never got the answer. Found seconds after its claim, it is resent; the
    same for a first part handed over by the turn's finish (it records its claim time too)."""
    row = await _dead_process_send(store, handed=handed)
    requeued, failed = await store.outbox.recover_expired_sends(
        idempotent_platforms=[], other_platforms=[], windowed_platforms={"sink": 20.0}
    )
    assert (requeued, failed) == (1, 0)
    [again] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=30)
    assert again.id == row.id and not again.ambiguous


async def test_a_send_of_a_dead_process_older_than_the_key_window_stays_ambiguous(
    store: Store,
) -> None:
    row = await _dead_process_send(store)
    await _expire(store, "deliveries", "claimed_at", row.id)  # claimed 1 s ago
    requeued, failed = await store.outbox.recover_expired_sends(
        idempotent_platforms=[], other_platforms=[], windowed_platforms={"sink": 0.5}
    )
    assert (requeued, failed) == (0, 1)
    assert await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=30) == []


# --- a claim waiting for pacing is not on the wire (migration 0014) ---------------


class SlowPacedSink(SinkTransport):
    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        return [PaceRule("chat:c", 2.0)]


async def test_a_claim_taken_over_while_it_waited_for_pacing_is_resent_once_without_idempotency(
    store: Store, sink: SinkServer
) -> None:
    """A platform without idempotency (Telegram, Slack): a claim recovered while it waited
    for pacing is requeued, not failed as ambiguous; the stalled worker, when its wait ends,
    finds its claim gone before the send and sends nothing; the taker sends it once."""
    stalled = await _delivery(store, lease=30)
    transport = SlowPacedSink(sink.url)
    settings = DeliverySettings(lease_seconds=30)
    worker = DeliveryWorker(
        store, {"sink": transport}, metrics=Metrics(), wake=Signal(), settings=settings
    )
    await worker._budget.reserve(pace_rules(transport, TARGET))
    delivering = asyncio.create_task(worker.deliver(stalled))
    await wait_for(lambda: _pacing_marked(store, stalled.id), timeout=5)
    await _expire(store, "deliveries", "lease_until", stalled.id)
    assert await store.outbox.recover_expired_sends(
        idempotent_platforms=[], other_platforms=["sink"]
    ) == (
        1,
        0,
    )
    [taker] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=30)
    assert taker.id == stalled.id and taker.pacing_until is None
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(delivering, 10)
    assert sink.received == []
    other = DeliveryWorker(
        store, {"sink": transport}, metrics=Metrics(), wake=Signal(), settings=settings
    )
    await other.deliver(taker)
    [row] = await store.outbox.deliveries_for_session(stalled.session_id)
    assert (row.status, row.ambiguous, row.pacing_until) == ("sent", False, None)
    assert [b["text"] for b in sink.received] == ["a"]
    await transport.aclose()


async def _log_delivery_writes(store: Store) -> None:
    """Record every write to a delivery row (a real trigger): what the hot path costs."""
    async with store.db.connection() as conn:
        await conn.execute(
            """
            CREATE TABLE delivery_writes (n serial, id bigint, status text, pacing boolean);
            CREATE FUNCTION log_delivery_write() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO delivery_writes (id, status, pacing)
                VALUES (NEW.id, NEW.status, NEW.pacing_until IS NOT NULL);
                RETURN NEW;
            END $$;
            CREATE TRIGGER delivery_writes AFTER UPDATE ON deliveries
                FOR EACH ROW EXECUTE FUNCTION log_delivery_write();
            """
        )


async def _writes(store: Store, delivery_id: int) -> list[tuple[str, bool]]:
    async with store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT status, pacing FROM delivery_writes WHERE id = $1 ORDER BY n", delivery_id
        )
    return [(r["status"], r["pacing"]) for r in rows]


async def test_only_a_send_that_waits_for_pacing_writes_the_mark(
    store: Store, sink: SinkServer
) -> None:
    """a handed-over delivery with no pacing wait is sent with one write to its
    row (``sent``), as before; one that waits adds the mark and its clearing."""
    await _log_delivery_writes(store)
    transport = PacedSink(sink.url)
    worker = DeliveryWorker(
        store,
        {"sink": transport},
        metrics=Metrics(),
        wake=Signal(),
        settings=DeliverySettings(lease_seconds=30),
    )
    free = await _delivery(store, lease=30, handed=True, thread="free")
    await worker.deliver(free)
    assert await _writes(store, free.id) == [("sent", False)]
    paced = await _delivery(store, lease=30, handed=True, thread="paced")
    await worker.deliver(paced)  # the chat's previous send was just now: it waits ~1 s
    assert await _writes(store, paced.id) == [
        ("sending", True),
        ("sending", False),
        ("sent", False),
    ]
    assert len(sink.accepted) == 2
    await transport.aclose()


@pytest.mark.parametrize("handed", [False, True], ids=["claimed", "handed-over"])
async def test_a_dead_process_claim_waiting_for_pacing_is_resent_and_one_on_the_wire_is_not(
    store: Store, handed: bool
) -> None:
    """Recovery on a platform without idempotency: the claim still waiting for its pacer is
    requeued; once the mark is cleared (the request goes out next) it is ambiguous."""
    waiting = await _dead_process_send(store, handed=handed)
    await store.outbox.mark_pacing(waiting, wait=30)
    assert await store.outbox.recover_expired_sends(
        idempotent_platforms=[], other_platforms=["sink"]
    ) == (
        1,
        0,
    )
    [row] = await store.outbox.deliveries_for_session(waiting.session_id)
    assert (row.status, row.ambiguous, row.claim_token) == ("pending", False, None)
    assert "waited for pacing" in (row.last_error or "")

    sent = await _dead_process_send(store, handed=handed, thread="u")
    await store.outbox.mark_pacing(sent, wait=30)
    await store.outbox.mark_on_wire(sent)
    assert await store.outbox.recover_expired_sends(
        idempotent_platforms=[], other_platforms=["sink"]
    ) == (
        0,
        1,
    )
    [row] = await store.outbox.deliveries_for_session(sent.session_id)
    assert (row.status, row.ambiguous) == ("failed", True)


async def test_the_key_window_counts_from_the_end_of_the_pacing_wait(store: Store) -> None:
    """Mattermost: a send that waited long for pacing went out when the wait ended, so the
    platform's idempotency window counts from then (claimed_at moves up), not from the claim."""
    row = await _dead_process_send(store)
    await _expire(store, "deliveries", "claimed_at", row.id)  # claimed 1 s ago
    await store.outbox.mark_pacing(row, wait=0.5)
    await store.outbox.mark_on_wire(row)  # the send begins now
    assert await store.outbox.recover_expired_sends(
        idempotent_platforms=[], other_platforms=[], windowed_platforms={"sink": 0.9}
    ) == (1, 0)


async def test_through_the_pool_a_free_part_costs_one_write_and_a_paced_one_three(
    store: Store, sink: SinkServer
) -> None:
    """The worker pool's own path: a part handed over to an idle pool is sent with one write
    to its row; one whose chat is not ready is parked off the workers with the mark, which
    is cleared before it goes out."""
    await _log_delivery_writes(store)
    transport = PacedSink(sink.url)
    wake = Signal()
    worker = DeliveryWorker(
        store,
        {"sink": transport},
        metrics=Metrics(),
        wake=wake,
        settings=DeliverySettings(lease_seconds=30, poll_seconds=0.2),
    )
    stopping = asyncio.Event()
    running = asyncio.create_task(worker.run(stopping))
    try:
        await wait_for(lambda: worker.idle_workers > 0, timeout=10)  # waiting for work
        free = await _delivery(store, lease=30, handed=True, thread="free")
        worker.hand_over(free)
        await wait_for(lambda: len(sink.accepted) == 1, timeout=10)
        paced = await _delivery(store, lease=30, handed=True, thread="paced")
        worker.hand_over(paced)  # the chat's previous send was just now: it waits ~1 s
        await wait_for(lambda: len(sink.accepted) == 2, timeout=10)

        async def recorded() -> bool:
            return (await _writes(store, paced.id))[-1:] == [("sent", False)]

        await wait_for(recorded, timeout=10)
    finally:
        stopping.set()
        await asyncio.wait_for(running, 10)
        await transport.aclose()
    assert await _writes(store, free.id) == [("sent", False)]
    assert await _writes(store, paced.id) == [
        ("sending", True),
        ("sending", False),
        ("sent", False),
    ]
