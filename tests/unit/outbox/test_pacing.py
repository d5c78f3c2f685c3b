"""One pacing budget per bot and chat: final sends, preview edits and typing draw on
the same budget; in memory while the gateway process is alone (no statement per send), in
PostgreSQL's ``pace_reserve`` while the process registry shows peers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.core.domain import ReplyTarget
from gateway.core.hub import Signal
from gateway.core.metrics import Metrics
from gateway.core.ports import PaceRule
from gateway.inbound.intake import to_inbound
from gateway.outbox.delivery import DeliverySettings, DeliveryWorker
from gateway.outbox.pacing import (
    NO_LIMIT,
    Budget,
    LocalBudget,
    Pacing,
    SharedBudget,
    cosmetic_rules,
    pace_rules,
)
from gateway.outbox.streaming import MAX_PREVIEW_WAIT
from session_store.db import Database
from session_store.records import DeliveryRecord, OutgoingReply
from session_store.repos.liveness import ProcessLiveness
from session_store.repos.previews import PreviewStore
from session_store.store import Store
from testsupport.fakes.sink import SinkTransport, sink_envelope
from testsupport.fakes.sink_server import SinkServer

INTERVAL = 10.0


class ChatPaced(SinkTransport):
    """The sink with a per-chat pacing rule, like Telegram's."""

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        return [PaceRule(f"chat:{target.chat_id}", INTERVAL)]


class CountingPreviews(PreviewStore):
    """The real store, counting its ``pace_reserve`` statements."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.reserves = 0

    async def reserve(
        self, rules: Sequence[tuple[str, float, int]], *, max_wait: float = 3600.0
    ) -> float:
        self.reserves += 1
        return await super().reserve(rules, max_wait=max_wait)


def _target(chat: str) -> ReplyTarget:
    return ReplyTarget(platform="sink", scope="test", chat_id=chat, thread_id="t")


async def _claimed(store: Store, chat: str) -> DeliveryRecord:
    await store.inbox.ingest(
        to_inbound(sink_envelope({"chat": chat, "thread": "t", "id": chat, "text": "q"})),
        raw=None,
    )
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None
    await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="a", parts=["a"])],
        target=_target(chat),
    )
    [row] = await store.outbox.claim_deliveries(platforms=["sink"], lease_seconds=30)
    return row


async def test_replicas_in_shared_mode_space_sends_and_edits_of_one_chat(database_url: str) -> None:
    one = await Store.connect(database_url, min_size=1, max_size=2)
    two = await Store.connect(database_url, min_size=1, max_size=2)
    try:
        a = Pacing(SharedBudget(PreviewStore(one.db)))
        b = Pacing(SharedBudget(PreviewStore(two.db)))
        a.set_peers(1)
        b.set_peers(1)
        assert a.shared and b.shared
        transport = ChatPaced("http://127.0.0.1:9/unused")
        # the keys a delivery's send and a streamer's edit reserve under are the same
        rules = pace_rules(transport, _target("c"))
        assert await a.reserve(rules) == 0.0  # replica A sends
        # replica B's preview edit right after: too late for a preview, nothing reserved
        assert await b.reserve(rules, MAX_PREVIEW_WAIT) > MAX_PREVIEW_WAIT
        # B's typing or final send waits for A's send's interval...
        edit = await b.reserve(rules)
        assert INTERVAL - 1 < edit <= INTERVAL
        # ... and A's next send for B's
        assert 2 * INTERVAL - 1 < await a.reserve(rules) <= 2 * INTERVAL
        # another chat is not held back
        assert await b.reserve(pace_rules(transport, _target("d"))) == 0.0
        # a process pacing alone does not see the others: why peers need the shared budget
        solo = Pacing(SharedBudget(PreviewStore(two.db)))
        assert not solo.shared and await solo.reserve(rules) == 0.0
    finally:
        await one.close()
        await two.close()


async def test_a_solo_gateway_sends_without_a_pacing_statement(
    store: Store, sink: SinkServer
) -> None:
    previews = CountingPreviews(store.db)
    pacing = Pacing(SharedBudget(previews))
    pacing.set_peers(0)
    transport = ChatPaced(sink.url)
    worker = DeliveryWorker(
        store,
        {"sink": transport},
        metrics=Metrics(),
        wake=Signal(),
        settings=DeliverySettings(),
        budget=pacing,
    )
    for chat in ("c1", "c2", "c3"):
        await worker.deliver(await _claimed(store, chat))
    assert len(sink.accepted) == 3
    assert previews.reserves == 0  # no pace_reserve on the solo hot path
    # the sends did reserve: the chat's next call (an edit, typing) waits for its interval
    assert INTERVAL - 1 < await pacing.reserve(pace_rules(transport, _target("c1"))) <= INTERVAL

    # a peer appears: from now on each send reserves in PostgreSQL, once
    pacing.set_peers(1)
    await worker.deliver(await _claimed(store, "c4"))
    assert len(sink.accepted) == 4
    assert previews.reserves == 1
    await transport.aclose()


async def test_pacing_turns_shared_when_a_peer_registers_without_a_burst(
    database_url: str,
) -> None:
    one = await Store.connect(database_url, min_size=1, max_size=2)
    two = await Store.connect(database_url, min_size=1, max_size=2)
    first, second = ProcessLiveness(database_url), ProcessLiveness(database_url)
    try:
        await first.ensure()
        assert first.peers == 0
        a = Pacing(SharedBudget(PreviewStore(one.db)))
        a.set_peers(first.peers)
        assert not a.shared
        rules = [PaceRule("sink:chat:c", INTERVAL)]
        assert await a.reserve(rules) == 0.0  # sent while alone: only in memory

        # a second gateway process takes its liveness lock: it sees the first at once...
        await second.ensure()
        assert second.peers == 1
        b = Pacing(SharedBudget(PreviewStore(two.db)))
        b.set_peers(second.peers)
        assert b.shared
        # ... and the first sees it at its next liveness check
        await first.ensure()
        assert first.peers == 1
        a.set_peers(first.peers)
        assert a.shared
        # the first process's send made alone is carried into the shared budget: the new
        # replica's edit of that chat waits for it instead of bursting
        assert INTERVAL - 1 < await a.reserve(rules) <= INTERVAL
        assert 2 * INTERVAL - 1 < await b.reserve(rules) <= 2 * INTERVAL

        # the peer goes: alone again, in memory, keeping its own spacing
        await second.close()
        await first.ensure()
        assert first.peers == 0
        a.set_peers(first.peers)
        assert not a.shared
        assert INTERVAL < await a.reserve(rules, NO_LIMIT)
    finally:
        await first.close()
        await second.close()
        await one.close()
        await two.close()


async def test_seeding_the_shared_budget_again_does_not_push_a_chat_further(
    store: Store,
) -> None:
    """A process that paced in PostgreSQL mirrors its reservations locally; when it goes solo
    and then shared again it seeds them back. That must not add them to the reservations
    already in PostgreSQL (each switch doubled the chat's wait)."""
    shared = SharedBudget(PreviewStore(store.db))
    rules = [PaceRule("sink:chat:c", 1.0)]
    for _ in range(5):
        await shared.reserve(rules)  # the chat is now free in about 5 s
    await shared.seed([("sink:chat:c", 5.0)])  # the same 5 s, as mirrored locally
    await shared.seed([("sink:chat:c", 5.0)])
    assert 4.0 < await shared.reserve(rules, 0.0) <= 5.0
    await shared.seed([("sink:chat:c", 8.0), ("sink:chat:d", 3.0)])  # later, and a new key
    assert 7.0 < await shared.reserve(rules, 0.0) <= 8.0
    assert 2.0 < await shared.reserve([PaceRule("sink:chat:d", 1.0)], 0.0) <= 3.0


# --- bursts (GCRA): the same cell in memory and in PostgreSQL --------------------------------


async def _waits(budget: Budget, rules: list[PaceRule], n: int) -> list[float]:
    return [round(await budget.reserve(rules), 1) for _ in range(n)]


@pytest.mark.parametrize("where", ["local", "shared"])
async def test_a_quiet_chat_takes_a_burst_at_once_then_keeps_the_rate(
    store: Store, where: str
) -> None:
    budget: Budget = LocalBudget() if where == "local" else SharedBudget(PreviewStore(store.db))
    burst = [PaceRule(f"sink:chat:{where}", 10.0, 3)]
    # three at once (a backlog after an outage), then one per interval
    assert await _waits(budget, burst, 5) == [0.0, 0.0, 0.0, 10.0, 20.0]
    # the strictest key decides: a chat with a burst under a server key without one
    both = [PaceRule(f"sink:chat:{where}2", 10.0, 3), PaceRule(f"sink:server:{where}", 5.0)]
    assert await _waits(budget, both, 3) == [0.0, 5.0, 10.0]
    # a 429's Retry-After spends the burst: the next call waits for it, the one after an
    # interval more; a second 429 during the hold is measured from now (it was added to the
    # first: 80 s), and a shorter one leaves the hold as it is
    held = [PaceRule(f"sink:chat:{where}3", 10.0, 3)]
    await budget.hold(held, 30.0)
    await budget.hold(held, 30.0)
    await budget.hold(held, 5.0)
    assert await _waits(budget, held, 2) == [30.0, 40.0]
    # a burst of 1 is the plain spacing of before
    plain = [PaceRule(f"sink:chat:{where}4", 10.0)]
    assert await _waits(budget, plain, 3) == [0.0, 10.0, 20.0]


@pytest.mark.parametrize("where", ["local", "shared"])
async def test_previews_leave_the_final_send_a_slot_free_at_once(store: Store, where: str) -> None:
    """Preview edits draw on the chat's budget only beyond one burst slot: however many of
    them asked, the final send that follows goes at once (in a Telegram group, 20 calls a
    minute, it had waited behind them for seconds)."""
    budget: Budget = LocalBudget() if where == "local" else SharedBudget(PreviewStore(store.db))
    group = [
        PaceRule(f"telegram:chat:{where}", 1.0, 3),
        PaceRule(f"telegram:group:{where}", 3600.0, 3),
    ]
    previews = cosmetic_rules(group)
    # each preview takes a slot only when one is free now; two of the three go
    waits = [await budget.reserve(previews, MAX_PREVIEW_WAIT) for _ in range(5)]
    assert [w <= MAX_PREVIEW_WAIT for w in waits] == [True, True, False, False, False]
    # the final send: its slot is free at once, and then the burst is spent
    assert await budget.reserve(group) <= MAX_PREVIEW_WAIT
    assert await budget.reserve(group, 0.0) > 3000
    # a key with a burst of 1 has no slot to spare: its rules stay as they are
    assert cosmetic_rules([PaceRule("k", 1.0)]) == [PaceRule("k", 1.0)]


async def test_a_process_of_the_previous_release_paces_with_the_old_statement(
    store: Store,
) -> None:
    """During a rolling upgrade the replicas still on the release before migration 0015 call
    the three-argument ``pace_reserve``: it keeps working, as plain spacing, on the same
    keys the new replicas pace with bursts."""
    shared = SharedBudget(PreviewStore(store.db))
    rules = [PaceRule("sink:chat:old", 10.0, 3)]
    assert await _waits(shared, rules, 2) == [0.0, 0.0]  # a new replica: two of its burst
    async with store.db.connection() as conn:
        old = "SELECT pace_reserve($1::text[], $2::double precision[], $3::double precision)"
        # an old replica waits for everything reserved so far: no burst of its own
        wait = await conn.fetchval(old, ["sink:chat:old"], [10.0], 3600.0)
        assert round(wait, 1) == 20.0
        wait = await conn.fetchval(old, ["sink:chat:old"], [10.0], 3600.0)
        assert round(wait, 1) == 30.0
    # and the new replica sees the old one's reservations
    assert await _waits(shared, rules, 1) == [20.0]
