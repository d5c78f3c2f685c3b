"""The store's hot path against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from gateway.core.domain import (
    Envelope,
    EventKind,
    ReplyTarget,
    Sender,
    SessionKey,
    Trigger,
)
from gateway.inbound.intake import to_inbound
from session_store.errors import LeaseLost
from session_store.records import DeliveryRecord, InboundItem, InboundNote, OutgoingReply
from session_store.store import Store


def envelope(
    text: str,
    *,
    message_id: str,
    event_id: str | None = None,
    chat: str = "general",
    thread: str | None = "t1",
    trigger: Trigger = Trigger.ALWAYS,
    kind: EventKind = EventKind.MESSAGE,
    command: str | None = None,
) -> InboundItem:
    """What the core hands the store for a web chat message
    (``gateway.inbound.intake.to_inbound``)."""
    key = SessionKey(platform="web", scope="local", chat_id=chat, thread_id=thread)
    return to_inbound(
        Envelope(
            key=key,
            target=ReplyTarget(
                platform="web",
                scope="local",
                chat_id=chat,
                thread_id=thread,
                reply_to_message_id=message_id,
            ),
            message_id=message_id,
            event_id=event_id,
            text=text,
            sender=Sender(id="u1", name="Ada"),
            trigger=trigger,
            kind=kind,
            command=command,
        )
    )


async def test_concurrent_ingests_into_one_session_get_dense_seq_numbers(store: Store) -> None:
    results = await asyncio.gather(
        *(
            store.inbox.ingest(
                envelope(f"m{i}", message_id=f"m{i}", event_id=f"e{i}"), raw={"i": i}
            )
            for i in range(50)
        )
    )
    assert {r.status for r in results} == {"accepted"}
    assert len({r.session_id for r in results}) == 1
    assert sorted(r.seq_no or 0 for r in results) == list(range(1, 51))
    session = await store.sessions.get_session(results[0].session_id)  # type: ignore[arg-type]
    assert session.last_seq_no == 50 and session.message_count == 50


async def test_same_event_twice_is_stored_once(store: Store) -> None:
    first = await store.inbox.ingest(envelope("hi", message_id="m1", event_id="e1"), raw={})
    again = await store.inbox.ingest(envelope("hi", message_id="m1", event_id="e1"), raw={})
    assert (first.status, again.status) == ("accepted", "duplicate")
    assert [m.content for m in await store.sessions.recent(first.session_id or 0)] == ["hi"]


async def test_same_message_under_another_event_id_is_stored_once(store: Store) -> None:
    # Slack: one post arrives as app_mention and as message with different event ids
    first = await store.inbox.ingest(envelope("hi", message_id="m1", event_id="e1"), raw={})
    again = await store.inbox.ingest(envelope("hi", message_id="m1", event_id="e2"), raw={})
    assert again.status == "duplicate"
    session = await store.sessions.get_session(first.session_id or 0)
    assert session.last_seq_no == 1  # a duplicate consumes no seq_no


async def test_duplicates_consume_no_seq_number(store: Store) -> None:
    await store.inbox.ingest(envelope("a", message_id="a", event_id="ea"), raw={})
    await store.inbox.ingest(envelope("a", message_id="a", event_id="ea"), raw={})
    third = await store.inbox.ingest(envelope("b", message_id="b", event_id="eb"), raw={})
    assert third.seq_no == 2


async def test_recent_and_delta_return_rows_in_order(store: Store) -> None:
    ids = [
        (await store.inbox.ingest(envelope(f"m{i}", message_id=f"m{i}"), raw=None)).session_id
        for i in range(1, 11)
    ]
    sid = ids[0] or 0
    recent = await store.sessions.recent(sid, limit=3)
    assert [(m.seq_no, m.content) for m in recent] == [(8, "m8"), (9, "m9"), (10, "m10")]
    delta = await store.sessions.delta(sid, after_seq=4, limit=3)
    assert [m.seq_no for m in delta] == [5, 6, 7]
    assert await store.sessions.delta(sid, after_seq=10) == []


async def test_threads_are_separate_sessions(store: Store) -> None:
    a = await store.inbox.ingest(envelope("in a", message_id="1", thread="a"), raw=None)
    b = await store.inbox.ingest(envelope("in b", message_id="2", thread="b"), raw=None)
    none = await store.inbox.ingest(envelope("no thread", message_id="3", thread=None), raw=None)
    none2 = await store.inbox.ingest(envelope("no thread 2", message_id="4", thread=None), raw=None)
    assert len({a.session_id, b.session_id, none.session_id}) == 3
    assert none.session_id == none2.session_id
    assert [m.content for m in await store.sessions.recent(a.session_id or 0)] == ["in a"]


async def test_closed_session_key_gets_a_fresh_session(store: Store) -> None:
    first = await store.inbox.ingest(envelope("one", message_id="1"), raw=None)
    assert await store.sessions.close_session(first.session_id or 0)
    second = await store.inbox.ingest(envelope("two", message_id="2"), raw=None)
    assert second.session_id != first.session_id
    assert second.seq_no == 1
    assert (await store.sessions.get_session(first.session_id or 0)).status == "closed"


async def test_rejected_and_ignored_events_are_recorded_with_reason(store: Store) -> None:
    rej = await store.inbox.ingest(
        InboundNote(platform="web", status="rejected", reason="missing chat", event_id="x1"),
        raw={"bad": True},
    )
    ign = await store.inbox.ingest(
        InboundNote(platform="web", status="ignored", reason="bot message", event_id="x2"), raw={}
    )
    assert (rej.status, ign.status) == ("rejected", "ignored")
    assert rej.reason == "missing chat"


async def test_edit_is_an_annotation_not_a_rewrite(store: Store) -> None:
    first = await store.inbox.ingest(envelope("helo", message_id="m1", event_id="e1"), raw=None)
    edit = await store.inbox.ingest(
        envelope("hello", message_id="m1", event_id="e2", kind=EventKind.EDIT), raw=None
    )
    assert edit.status == "accepted" and edit.message_id == first.message_id
    [msg] = await store.sessions.recent(first.session_id or 0)
    assert msg.content == "helo" and msg.edited_at is not None
    unknown = await store.inbox.ingest(
        envelope("x", message_id="nope", event_id="e3", kind=EventKind.EDIT), raw=None
    )
    assert unknown.status == "ignored"


async def test_trigger_rules_decide_whether_a_turn_is_requested(store: Store) -> None:
    ctx = await store.inbox.ingest(envelope("ctx", message_id="1", trigger=Trigger.NEVER), raw=None)
    follow = await store.inbox.ingest(
        envelope("f", message_id="2", trigger=Trigger.IF_FOLLOWING), raw=None
    )
    assert not ctx.turn_requested and not follow.turn_requested
    ask = await store.inbox.ingest(envelope("ask", message_id="3"), raw=None)
    assert ask.turn_requested
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None and claim.session_id == ask.session_id
    await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=3,
        replies=[OutgoingReply(content="ok", parts=["ok"])],
        target=ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t1"),
    )
    # the bot has now answered here, so an un-mentioned follow-up asks for a turn
    follow2 = await store.inbox.ingest(
        envelope("f2", message_id="5", trigger=Trigger.IF_FOLLOWING), raw=None
    )
    assert follow2.turn_requested and follow2.seq_no == 5


async def test_a_follow_up_is_answered_while_the_answer_is_still_being_written(
    store: Store,
) -> None:
    """A follow-up was ignored: the thread counted as engaged only once the answer was
    recorded, while the person already saw it streaming. It is engaged once the bot was
    addressed there."""
    chatter = await store.inbox.ingest(
        envelope("f0", message_id="0", thread="t0", trigger=Trigger.IF_FOLLOWING), raw=None
    )
    assert not chatter.turn_requested  # never addressed there: not engaged
    ask = await store.inbox.ingest(envelope("ask", message_id="1"), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None and claim.session_id == ask.session_id  # the answer is underway
    follow = await store.inbox.ingest(
        envelope("f", message_id="2", trigger=Trigger.IF_FOLLOWING), raw=None
    )
    assert follow.turn_requested and follow.session_id == ask.session_id
    context = await store.inbox.ingest(
        envelope("c", message_id="3", trigger=Trigger.NEVER), raw=None
    )
    assert not context.turn_requested


async def test_a_finished_turn_hands_its_first_part_over_claimed_only_when_it_is_next(
    store: Store,
) -> None:
    """finish + outbox in one statement; the first part comes back claimed (no
    claim transaction) unless an earlier delivery of the session is still open, and
    ``mark_sent`` says whether parts wait behind the one it marks."""
    target = ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t1")
    await store.inbox.ingest(envelope("one", message_id="1"), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10, context_page=64)
    assert claim is not None and claim.pending is not None
    assert [m.seq_no for m in claim.pending] == [1]
    assert claim.context is not None and [r.seq_no for r in claim.context.page] == [1]
    first = await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="a b", parts=["a", "b"])],
        target=target,
        hand_over=True,
    )
    assert first.seqs == [2] and first.deliveries == 2 and not first.more
    [handed] = first.handed
    assert (handed.part_no, handed.status, handed.attempts) == (1, "sending", 1)
    assert handed.claim_token is not None
    # part 2 waits behind part 1: not claimable yet
    assert await store.outbox.claim_deliveries(platforms=["web"], lease_seconds=30) == []

    await store.inbox.ingest(envelope("two", message_id="3"), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10, context_page=64)
    assert claim is not None and claim.context is not None
    # the context page holds the answer and both questions, newest first
    assert [r.seq_no for r in claim.context.page] == [3, 2, 1]
    second = await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=3,
        replies=[OutgoingReply(content="c", parts=["c"])],
        target=target,
        hand_over=True,
    )
    assert second.handed == ()  # part 2 of the first answer is still pending before it
    assert await store.outbox.mark_sent(handed, "p1") is True  # parts wait behind it
    [part2] = await store.outbox.claim_deliveries(platforms=["web"], lease_seconds=30)
    assert part2.part_no == 2
    assert await store.outbox.mark_sent(part2, "p2") is True
    [last] = await store.outbox.claim_deliveries(platforms=["web"], lease_seconds=30)
    assert last.seq_no == 4
    assert await store.outbox.mark_sent(last, "p3") is False


async def test_a_finished_turn_says_when_messages_arrived_during_the_run(store: Store) -> None:
    target = ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t1")
    await store.inbox.ingest(envelope("one", message_id="1"), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert claim is not None
    await store.inbox.ingest(envelope("meanwhile", message_id="2"), raw=None)
    done = await store.outbox.finish_turn_outbox(
        claim, handled_seq=1, replies=[OutgoingReply(content="a", parts=["a"])], target=target
    )
    assert done.more and done.handed == ()  # not asked to hand over
    again = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert again is not None and again.pending is not None
    assert [m.seq_no for m in again.pending] == [2, 3]  # the question and our answer


async def test_fenced_writes_made_at_once_are_one_statement_each_told_its_own_outcome(
    store: Store,
) -> None:
    """Receipts, pacing marks and renewals that delivery workers make at the same moment are
    group-committed (one statement); each caller learns its own row's outcome, and a claim
    taken over meanwhile writes nothing and raises ``LeaseLost`` without failing the rest."""
    target = ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t1")
    for n in range(5):
        await store.inbox.ingest(envelope(f"q{n}", message_id=f"m{n}", thread=f"t{n}"), raw=None)
    handed: list[DeliveryRecord] = []
    for _ in range(5):
        claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10, context_page=64)
        assert claim is not None
        finished = await store.outbox.finish_turn_outbox(
            claim,
            handled_seq=claim.done_seq + 1,
            replies=[OutgoingReply(content="a", parts=["a"])],
            target=target,
            hand_over=True,
        )
        handed += finished.handed
    assert len(handed) == 5
    stale = replace(handed[4], claim_token=str(uuid.uuid4()))  # taken over by another claim
    calls = []
    conn_fetch = asyncpg.connection.Connection.fetch

    async def fetch(self: Any, query: str, *args: Any, **kw: Any) -> Any:
        calls.append(query)
        return await conn_fetch(self, query, *args, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(asyncpg.connection.Connection, "fetch", fetch)
        results = await asyncio.gather(
            store.outbox.mark_sent(handed[0], "p0"),
            store.outbox.mark_sent(handed[1], "p1"),
            store.outbox.mark_pacing(handed[2], wait=2.0, lease_seconds=30),
            store.outbox.renew_delivery(handed[3], lease_seconds=30),
            store.outbox.mark_sent(stale, "p4"),
            return_exceptions=True,
        )
    assert list(results[:4]) == [False, False, None, None]
    assert isinstance(results[4], LeaseLost)
    assert len(calls) == 1  # all five in one statement
    by_id = {
        d.id: d for h in handed for d in await store.outbox.deliveries_for_session(h.session_id)
    }
    assert [by_id[h.id].status for h in handed] == ["sent", "sent", "sending", "sending", "sending"]
    assert by_id[handed[1].id].platform_message_id == "p1"
    assert by_id[handed[4].id].platform_message_id is None
    assert by_id[handed[2].id].pacing_until is not None  # marked off the wire
    # the pacing mark is cleared by the next write, alone now: the clearing lands
    await store.outbox.mark_on_wire(handed[2])
    assert await store.outbox.mark_sent(handed[2], "p2") is False
