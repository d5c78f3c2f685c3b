"""Session lifecycle (active <-> paused, active|paused -> closed -> archived), topic, priority
and tags, and message kinds, against a real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from gateway.core.domain import ReplyTarget, SessionKey, Trigger
from session_store.errors import RequestError, SessionNotFound
from session_store.records import OutgoingReply
from session_store.repos.operator import OperatorStore
from session_store.repos.sessions import SQL
from session_store.store import Store
from tests.unit.session_store.test_store import envelope

TARGET = ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t1")
KEY = SessionKey(platform="web", scope="local", chat_id="general", thread_id="t1")


async def _opened(store: Store, text: str = "hi", message_id: str = "m1") -> int:
    result = await store.inbox.ingest(envelope(text, message_id=message_id), raw=None)
    assert result.session_id is not None
    return result.session_id


async def test_each_allowed_step_moves_the_status(store: Store) -> None:
    sid = await _opened(store)
    assert (await store.sessions.transition(sid, "pause")).status == "paused"
    assert (await store.sessions.transition(sid, "resume")).status == "active"
    assert (await store.sessions.transition(sid, "pause")).status == "paused"
    closed = await store.sessions.transition(sid, "close")  # a paused session can be closed
    assert closed.status == "closed" and closed.closed_at is not None
    assert (await store.sessions.transition(sid, "archive")).status == "archived"
    other = await _opened(store, message_id="m2")  # the key's next message opens a new one
    assert other != sid
    assert (await store.sessions.transition(other, "close")).status == "closed"


@pytest.mark.parametrize(
    ("steps", "refused", "status"),
    [
        ((), "archive", "active"),  # only a closed session is archived
        ((), "resume", "active"),
        (("close",), "pause", "closed"),
        (("close",), "resume", "closed"),
        (("close",), "close", "closed"),
        (("pause",), "pause", "paused"),
        (("pause",), "archive", "paused"),
        (("close", "archive"), "resume", "archived"),
        (("close", "archive"), "pause", "archived"),
        (("close", "archive"), "close", "archived"),
    ],
)
async def test_a_step_the_status_does_not_allow_is_refused_and_changes_nothing(
    store: Store, steps: tuple[str, ...], refused: str, status: str
) -> None:
    sid = await _opened(store)
    for step in steps:
        await store.sessions.transition(sid, step)
    with pytest.raises(RequestError, match=f"is {status}; {refused} needs") as caught:
        await store.sessions.transition(sid, refused)
    assert caught.value.status == 409
    assert (await store.sessions.get_session(sid)).status == status


async def test_unknown_sessions_and_steps_are_refused(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.sessions.transition(999_999, "pause")
    with pytest.raises(SessionNotFound):
        await store.sessions.set_attributes(999_999, topic="x")
    sid = await _opened(store)
    with pytest.raises(RequestError, match="unknown lifecycle step"):
        await store.sessions.transition(sid, "explode")


async def test_a_paused_session_stores_what_arrives_and_resume_answers_it_in_one_turn(
    store: Store,
) -> None:
    sid = await _opened(store, "first")
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert claim is not None
    await store.outbox.finish_turn_outbox(
        claim,
        handled_seq=1,
        replies=[OutgoingReply(content="hello", parts=["hello"])],
        target=TARGET,
    )
    await store.sessions.transition(sid, "pause")
    later = [
        await store.inbox.ingest(envelope(f"q{i}", message_id=f"p{i}"), raw=None) for i in range(2)
    ]
    # stored in the paused session (it is still the open session of its place) ...
    assert {r.session_id for r in later} == {sid} and all(r.turn_requested for r in later)
    assert (await store.sessions.get_session(sid)).status == "paused"
    # ... and nothing is answered
    assert await store.turns.claim_turn(lease_seconds=30) is None
    resume = await store.inbox.ingest(
        envelope("/resume", message_id="r", command="resume"), raw=None
    )
    assert resume.session_id == sid
    assert (await store.sessions.get_session(sid)).status == "active"
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert claim is not None and claim.pending is not None
    # everything after the last handled seq: our answer, then what waited, then /resume
    assert [m.content for m in claim.pending] == ["hello", "q0", "q1", "/resume"]
    await store.outbox.finish_turn_outbox(
        claim, handled_seq=5, replies=[OutgoingReply(content="a", parts=["a"])], target=TARGET
    )
    kinds = [(m.seq_no, m.role, m.kind) for m in await store.sessions.recent(sid)]
    assert kinds == [
        (1, "user", "chat"),
        (2, "assistant", "answer"),
        (3, "user", "chat"),
        (4, "user", "chat"),
        (5, "user", "chat"),
        (6, "assistant", "answer"),
    ]
    assert await store.turns.claim_turn(lease_seconds=30) is None


async def test_resume_from_outside_the_thread_makes_the_waiting_turn_due(store: Store) -> None:
    sid = await _opened(store)
    await store.sessions.transition(sid, "pause")
    await store.inbox.ingest(envelope("while paused", message_id="m2"), raw=None)
    assert await store.turns.claim_turn(lease_seconds=30) is None
    await store.sessions.transition(sid, "resume")
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10)
    assert claim is not None and claim.pending is not None
    assert [m.content for m in claim.pending] == ["hi", "while paused"]


async def test_an_archived_session_is_read_only_and_its_key_opens_a_new_session(
    store: Store,
) -> None:
    sid = await _opened(store)
    await store.sessions.transition(sid, "close")
    await store.sessions.transition(sid, "archive")
    with pytest.raises(RequestError, match="archived") as caught:
        await store.sessions.set_attributes(sid, topic="x")
    assert caught.value.status == 409
    with pytest.raises(RequestError, match="archived"):
        await OperatorStore(store).append_message(sid, participant="agent", content="late")
    fresh = await _opened(store, "again", message_id="m2")
    assert fresh != sid
    assert (await store.sessions.get_session(fresh)).status == "active"
    assert (await store.sessions.get_session(sid)).message_count == 1
    found = await store.sessions.find_session(KEY)
    assert found is not None and found.id == fresh


async def test_topic_priority_and_tags_are_set_and_filtered(store: Store) -> None:
    a = await _opened(store)
    b = (await store.inbox.ingest(envelope("b", message_id="b", thread="t2"), raw=None)).session_id
    c = (await store.inbox.ingest(envelope("c", message_id="c", thread="t3"), raw=None)).session_id
    assert b is not None and c is not None
    await store.sessions.set_attributes(a, topic="Budget 2027", priority=2, tags=["ops", "q1"])
    await store.sessions.set_attributes(b, topic="Hiring", priority=5, tags=["hr", " q1 ", ""])
    await store.sessions.transition(c, "pause")
    got = await store.sessions.set_attributes(b, priority=1)  # the rest is kept
    assert (got.topic, got.priority, got.tags) == ("Hiring", 1, ("hr", "q1"))

    async def ids(**filters: object) -> set[int]:
        return {s.id for s in await store.sessions.list_sessions(**filters)}  # type: ignore[arg-type]

    assert await ids(topic_contains="budget") == {a}
    assert await ids(tags=["q1"]) == {a, b}
    assert await ids(tags=["q1", "hr"]) == {b}
    assert await ids(min_priority=2) == {a}
    assert await ids(status="paused") == {c}
    assert await ids(topic_contains="%") == set()  # LIKE wildcards are literal
    assert await ids() == {a, b, c}


async def test_kinds_default_to_chat_and_decisions_are_read_with_open_checkpoints(
    store: Store,
) -> None:
    sid = await _opened(store, "plain")
    await store.inbox.ingest(
        envelope("/decision ship on Monday", message_id="d1", command="decision"), raw=None
    )
    await store.inbox.ingest(envelope("/decision", message_id="d2", command="decision"), raw=None)
    await store.inbox.ingest(envelope("ctx", message_id="n", trigger=Trigger.NEVER), raw=None)
    ops = OperatorStore(store)
    await ops.append_message(
        sid, participant="agent", content="use Postgres", kind="decision", importance=3
    )
    await ops.update_checkpoint(sid, name="draft", status="done")
    await ops.update_checkpoint(sid, name="review", status="blocked")
    await ops.update_checkpoint(sid, name="dropped", status="cancelled")
    decisions, open_checks = await store.sessions.decisions(sid)
    assert [(m.content, m.importance) for m in decisions] == [
        ("/decision ship on Monday", 0),
        ("use Postgres", 3),
    ]
    assert [c.name for c in open_checks] == ["review"]
    kinds = {m.content: m.kind for m in await store.sessions.recent(sid)}
    assert kinds["plain"] == "chat" and kinds["/decision"] == "chat" and kinds["ctx"] == "chat"
    with pytest.raises(SessionNotFound):
        await store.sessions.decisions(999_999)


async def test_decisions_and_open_checkpoints_are_read_from_their_partial_indexes(
    store: Store,
) -> None:
    """Proof by the plan, with enough rows that a scan would be chosen if it were cheaper:
    20,000 messages of one session, three of them decisions; 5,000 checkpoints, most done."""
    sid = await _opened(store)
    async with store.db.connection() as conn:
        await conn.execute(
            """
            INSERT INTO messages (session_id, seq_no, role, content, kind)
            SELECT $1, g, 'user', 'm' || g,
                   CASE WHEN g % 7000 = 0 THEN 'decision' ELSE 'chat' END
            FROM generate_series(2, 20001) AS g
            """,
            sid,
        )
        await conn.execute(
            """
            INSERT INTO session_checkpoints (session_id, name, status)
            SELECT $1, 'c' || g, CASE WHEN g % 1000 = 0 THEN 'open' ELSE 'done' END
            FROM generate_series(1, 5000) AS g
            """,
            sid,
        )
        await conn.execute("ANALYZE messages; ANALYZE session_checkpoints")
        plans = []
        for name in ("session_decisions", "open_checkpoints"):
            sql = getattr(SQL, name)
            args = (sid, 200) if name == "session_decisions" else (sid,)
            raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
            plans.append(json.dumps(json.loads(raw) if isinstance(raw, str) else raw))
    decisions_plan, checkpoints_plan = plans
    assert "Seq Scan" not in decisions_plan and '"messages_decisions"' in decisions_plan
    assert "Seq Scan" not in checkpoints_plan
    assert '"session_checkpoints_open"' in checkpoints_plan
    decisions, open_checks = await store.sessions.decisions(sid)
    assert [m.seq_no for m in decisions] == [7000, 14000]
    assert len(open_checks) == 5
