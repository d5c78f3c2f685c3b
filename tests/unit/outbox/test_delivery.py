"""Delivery policy against the real store: what happens to a send whose worker died."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.domain import ReplyTarget
from gateway.core.hub import Signal
from gateway.core.metrics import Metrics
from gateway.inbound.intake import to_inbound
from gateway.outbox.delivery import HANDOFF_LIMIT, DeliverySettings, DeliveryWorker
from session_store.records import OutgoingReply
from session_store.store import Store
from testsupport.fakes.sink import SinkTransport, sink_envelope
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import wait_for


def _worker(store: Store, transport: SinkTransport, settings: DeliverySettings) -> DeliveryWorker:
    """A delivery worker for the sink surface alone (not running until told)."""
    return DeliveryWorker(
        store, {"sink": transport}, metrics=Metrics(), wake=Signal(), settings=settings
    )


async def _expired_send(store: Store) -> int:
    """A delivery claimed by a worker that then died: status 'sending', lease expired."""
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": "t", "id": "1", "text": "q"})), raw=None
    )
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None
    await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="a", parts=["a"])],
        target=ReplyTarget(platform="sink", scope="test", chat_id="c", thread_id="t"),
    )
    [row] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=0.05)

    async def expired() -> bool:
        async with store.db.connection() as conn:
            return bool(
                await conn.fetchval(
                    "SELECT lease_until < now() FROM deliveries WHERE id = $1", row.id
                )
            )

    await wait_for(expired, timeout=5)
    return row.id


@pytest.mark.parametrize(
    ("idempotent", "window", "expected"),
    [
        (True, None, "pending"),  # a resend cannot double-post: send it again
        (False, None, "failed"),  # it may already be on the platform: visible, not resent
        # claimed moments ago, and the platform remembers its key for 30 s (Mattermost):
        # a resend within that window (less a margin) lands once
        (True, 30.0, "pending"),
        # the window, less the margin for the requeue and the resend, is already over
        (True, 10.0, "failed"),
    ],
)
async def test_a_send_whose_worker_died_is_requeued_only_where_a_resend_is_safe(
    store: Store, idempotent: bool, window: float | None, expected: str
) -> None:
    delivery_id = await _expired_send(store)
    transport = SinkTransport("http://127.0.0.1:9/unused", idempotent=idempotent)
    transport.resend_window = window
    worker = _worker(store, transport, DeliverySettings(lease_seconds=60))
    await worker.recover()
    [row] = [d for d in await store.outbox.deliveries_for_session(1) if d.id == delivery_id]
    assert row.status == expected
    if expected == "failed":
        assert row.last_error is not None and row.last_error.startswith("ambiguous")
    await transport.aclose()


async def test_deliveries_handed_over_and_never_started_go_back_to_the_table_at_shutdown(
    store: Store,
) -> None:
    """a finished turn hands its first part to this process already claimed. If
    the process stops before sending it, it is put back as pending (fenced), not left as a
    send cut short that recovery would have to call ambiguous."""
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": "c", "thread": "t", "id": "1", "text": "q"})), raw=None
    )
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert claim is not None
    done = await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="a", parts=["a"])],
        target=ReplyTarget(platform="sink", scope="test", chat_id="c", thread_id="t"),
        hand_over=True,
    )
    [handed] = done.handed
    worker = _worker(store, SinkTransport("http://127.0.0.1:9/never"), DeliverySettings())
    worker.hand_over(handed)
    await worker.hand_back()
    assert not worker.accepting()  # stopping: finished turns leave rows in the table
    [row] = await store.outbox.deliveries_for_session(handed.session_id)
    assert row.status == "pending"
    [again] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=30)
    assert again.id == handed.id


async def _finished(store: Store, worker: DeliveryWorker, chat: str) -> None:
    """A turn in ``chat`` answered, its part handed to ``worker`` while it accepts."""
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": chat, "thread": "t", "id": chat, "text": "q"})),
        raw=None,
    )
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert claim is not None
    done = await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content=f"answer in {chat}", parts=[f"answer in {chat}"])],
        target=ReplyTarget(platform="sink", scope="test", chat_id=chat, thread_id="t"),
        hand_over=worker.accepting(),
    )
    for delivery in done.handed:
        worker.hand_over(delivery)


async def test_a_part_left_in_the_table_by_a_full_handoff_is_not_overtaken_by_later_ones(
    store: Store, sink: SinkServer
) -> None:
    """Workers send handed parts before they claim from the table. Once the handoff is
    full, a finished turn's part stays in the table; a part finished after it must not be
    handed over as soon as there is room again, or it goes out first, and under a lasting
    overload the table's parts wait seconds behind ever newer ones."""
    transport = SinkTransport(sink.url)
    worker = _worker(store, transport, DeliverySettings(workers=1))
    chats = [f"c{n}" for n in range(HANDOFF_LIMIT + 2)]
    for chat in chats[:HANDOFF_LIMIT]:
        await _finished(store, worker, chat)  # handed over: the handoff is now full
    await _finished(store, worker, chats[HANDOFF_LIMIT])  # full: left in the table
    worker._handed.take()  # a worker took one (and sends it): there is room again
    await _finished(store, worker, chats[HANDOFF_LIMIT + 1])
    stopping = asyncio.Event()
    running = asyncio.create_task(worker.work(stopping))
    try:
        await wait_for(lambda: len(sink.accepted) == len(chats) - 1, timeout=10)
    finally:
        stopping.set()
        await running
        await transport.aclose()
    sent = [post["text"] for post in sink.accepted]
    assert sent == [f"answer in {chat}" for chat in chats[1:]]
