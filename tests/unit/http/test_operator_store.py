"""The operator store against real PostgreSQL: appends by participants keep seq numbers dense
alongside ingest, and both plans of the cross-session search return the same pages."""

from __future__ import annotations

import asyncio

import pytest

from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey
from gateway.core.errors import RequestError
from gateway.inbound.intake import to_inbound
from session_store.repos import operator as operator_module
from session_store.repos.operator import OperatorStore
from session_store.store import Store


def _envelope(thread: str, n: int, text: str) -> Envelope:
    key = SessionKey(platform="web", scope="local", chat_id="general", thread_id=thread)
    target = ReplyTarget(
        platform="web",
        scope="local",
        chat_id="general",
        thread_id=thread,
        reply_to_message_id=f"{thread}-{n}",
    )
    return Envelope(
        key=key, target=target, message_id=f"{thread}-{n}", text=text, sender=Sender(id="u")
    )


async def test_participant_appends_and_ingest_share_one_dense_seq(store: Store) -> None:
    ops = OperatorStore(store)
    first = await store.inbox.ingest(to_inbound(_envelope("t", 0, "start")), raw=None)
    assert first.session_id is not None

    async def user(n: int) -> None:
        await store.inbox.ingest(to_inbound(_envelope("t", n, f"user {n}")), raw=None)

    async def agent(n: int) -> None:
        await ops.append_message(
            first.session_id,  # type: ignore[arg-type]
            participant=f"agent-{n % 3}",
            content=f"agent {n}",
            parts=[f"agent {n}"],
        )

    await asyncio.gather(*(user(n) for n in range(1, 21)), *(agent(n) for n in range(20)))
    messages = await store.sessions.messages(first.session_id, limit=100, with_deliveries=True)
    assert [m.seq_no for m in messages] == list(range(1, 42))
    session = await ops.get_session(first.session_id)
    assert session.last_seq_no == session.message_count == 41
    appended = [m for m in messages if m.role == "assistant"]
    assert len(appended) == 20
    for m in appended:  # each went to the outbox with the stored thread target
        [delivery] = m.deliveries
        assert delivery.seq_no == m.seq_no and delivery.target.thread_id == "t"
        assert delivery.target.reply_to_message_id is not None
    detail = await ops.session_detail(first.session_id)
    assert {p.participant for p in detail.participants} == {"agent-0", "agent-1", "agent-2"}


async def test_appending_needs_an_active_session_and_a_target_to_deliver(store: Store) -> None:
    ops = OperatorStore(store)
    stored = await store.inbox.ingest(to_inbound(_envelope("x", 0, "hello")), raw=None)
    sid = stored.session_id
    assert sid is not None
    await ops.close_session(sid)
    with pytest.raises(RequestError, match="closed") as info:
        await ops.append_message(sid, participant="a", content="late")
    assert info.value.status == 409
    assert (await ops.get_session(sid)).last_seq_no == 1  # nothing was allocated


@pytest.mark.parametrize("few", [0, operator_module.FEW_MATCHES])
async def test_both_cross_session_search_plans_page_the_same_newest_first(
    store: Store, few: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operator_module, "FEW_MATCHES", few)
    ops = OperatorStore(store)
    for n in range(12):
        text = f"needle number {n}" if n % 2 == 0 else f"hay {n}"
        await store.inbox.ingest(to_inbound(_envelope(f"s{n % 3}", n, text)), raw=None)
    seen: list[str] = []
    before = None
    while True:
        hits = await ops.search("needle", before=before, limit=4)
        seen.extend(h.snippet for h in hits)
        if len(hits) < 4:
            break
        before = hits[-1].message_id
    assert seen == [f"«needle» number {n}" for n in (10, 8, 6, 4, 2, 0)]


async def test_search_is_planned_for_each_word_never_with_a_generic_plan(
    database_url: str,
) -> None:
    """Prepared statements may switch to one generic plan after five runs, which cannot tell
    a rare word from one in every message (on a large database it read a common word's whole
    index entry: ``python -m benchmarks --only scale``). On this one connection the server
    counts which plans it used for each statement."""
    store = await Store.connect(database_url, min_size=1, max_size=1)
    try:
        ops = OperatorStore(store)
        for n in range(30):
            text = f"common words here {n}" + (" rare" if n % 10 == 0 else "")
            await store.inbox.ingest(to_inbound(_envelope(f"p{n % 5}", n, text)), raw=None)
        sid = (
            await store.inbox.ingest(to_inbound(_envelope("p0", 99, "common")), raw=None)
        ).session_id
        for _ in range(8):
            for word in ("common", "rare"):
                assert await ops.search(word, limit=5)
                assert await ops.search(word, session_id=sid, limit=5)
        async with store.db.connection() as conn:
            rows = await conn.fetch(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
        searches = {
            r["statement"]: (r["generic_plans"], r["custom_plans"])
            for r in rows
            if "websearch_to_tsquery" in r["statement"]
        }
        assert len(searches) >= 3  # the count, one cross-session search, the session search
        assert all(generic == 0 and custom > 5 for generic, custom in searches.values()), searches
    finally:
        await store.close()
