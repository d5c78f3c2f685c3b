"""Waiting for a chat's pacing never occupies a delivery worker: with the default pool (8
workers), busy Telegram groups with many parts each do not hold back anyone else's reply.
Every reply lands at the fake Bot API within 2 s of the moment its own chat's pacing (the
transport's rules, GCRA over what the chat was actually sent) and its place in its session
allow it."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest

from adapters.telegram.transport import TelegramBot, TelegramTransport
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.hub import WorkSignal
from gateway.core.metrics import Metrics
from gateway.inbound.intake import to_inbound
from gateway.outbox.delivery import DeliverySettings, DeliveryWorker
from gateway.outbox.pacing import pace_rules, tolerance
from session_store.records import OutgoingReply
from session_store.store import Store
from testsupport.fakes.sink import sink_envelope
from testsupport.fakes.telegram import FakeTelegram, Recorded
from testsupport.harness import wait_for

GROUPS = 8
#: a group goes 20 a minute after a burst of 3: its last part is due 9 s after its first,
#: and every private chat asks within those 9 s (32 questions 0.25 s apart)
GROUP_PARTS = 6
PRIVATE = 32
ALLOWED_LATENESS = 2.0
#: seconds between two private chats' questions
PRIVATE_EVERY = 0.25


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def _outbox(store: Store, chat_id: str, parts: list[str]) -> ReplyTarget:
    """One answered turn in the chat: its reply's parts are pending in the outbox."""
    target = ReplyTarget(platform="telegram", scope="chat", chat_id=chat_id)
    envelope = sink_envelope({"chat": chat_id, "id": f"m{chat_id}", "text": "q"})
    envelope = dataclasses.replace(
        envelope,
        key=SessionKey(platform="telegram", scope="chat", chat_id=chat_id, thread_id=None),
        target=target,
    )
    await store.inbox.ingest(to_inbound(envelope), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None
    await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=claim.done_seq + 1,
        replies=[OutgoingReply(content="\n".join(parts), parts=parts)],
        target=target,
    )
    return target


def _lateness(
    transport: TelegramTransport, target: ReplyTarget, sends: list[Recorded], start: float
) -> list[float]:
    """Per send, how long after its chat's pacing allowed it it arrived. A part may go once
    the one before it in its session arrived (the first: once the pool started), and once
    every pacing key's theoretical arrival time (replayed from the chat's actual sends) is
    within the key's burst tolerance."""
    rules = pace_rules(transport, target)
    tat = {rule.key: float("-inf") for rule in rules}
    ready = start
    late = []
    for send in sends:
        allowed = max([ready, *(tat[r.key] - tolerance(r) for r in rules)])
        late.append(send.at - allowed)
        for r in rules:
            tat[r.key] = max(tat[r.key], send.at) + r.interval
        ready = send.at
    return late


async def test_busy_groups_do_not_hold_back_other_chats_with_the_default_pool(
    store: Store, fake: FakeTelegram
) -> None:
    transport = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    targets: dict[str, ReplyTarget] = {}
    #: when each chat's first part was written (may go from then on)
    written: dict[str, float] = {}
    # the busy groups' rows are there first: a pool that waits in its workers spends itself
    # on them
    for g in range(GROUPS):
        chat = str(fake.group(f"g{g}").id)
        targets[chat] = await _outbox(store, chat, [f"g{g} part {k}" for k in range(GROUP_PARTS)])
    wake = WorkSignal()
    worker = DeliveryWorker(
        store,
        {"telegram": transport},
        metrics=Metrics(),
        wake=wake,
        settings=DeliverySettings(),  # the defaults: 8 workers
    )
    assert DeliverySettings().workers == 8
    stopping = asyncio.Event()
    start = time.monotonic()
    written.update(dict.fromkeys(targets, start))
    running = asyncio.create_task(worker.run(stopping))
    try:
        # private chats ask meanwhile, as people do, each answered while the groups drain
        for p in range(PRIVATE):
            await asyncio.sleep(PRIVATE_EVERY)
            chat = str(fake.private(fake.user(f"u{p}")).id)
            targets[chat] = await _outbox(store, chat, [f"p{p} reply"])
            written[chat] = time.monotonic()
            wake.set()  # as a finished turn does for each row it leaves in the table
        expected = GROUPS * GROUP_PARTS + PRIVATE
        await wait_for(lambda: len(fake.calls("sendMessage")) >= expected, timeout=120)
    finally:
        stopping.set()
        wake.wake_all()  # as the gateway's shutdown does: idle workers stop now, not on a poll
        await asyncio.wait_for(running, 30)
        await transport.close()
    by_chat: dict[str, list[Recorded]] = defaultdict(list)
    for call in fake.calls("sendMessage"):
        by_chat[str(call.params["chat_id"])].append(call)
    assert sum(len(v) for v in by_chat.values()) == expected  # each part once
    worst = {
        chat: max(_lateness(transport, targets[chat], sends, written[chat]))
        for chat, sends in by_chat.items()
    }
    late = {chat: round(s, 2) for chat, s in worst.items() if s > ALLOWED_LATENESS}
    print(f"worst lateness over the pacing allowance: {max(worst.values()):.3f} s")
    assert not late, late
    # the groups were paced, in order
    for g in range(GROUPS):
        chat = next(c for c, t in targets.items() if by_chat[c][0].params["text"] == f"g{g} part 0")
        sends = by_chat[chat]
        assert [s.params["text"] for s in sends] == [f"g{g} part {k}" for k in range(GROUP_PARTS)]
        assert sends[-1].at - sends[0].at > 8
