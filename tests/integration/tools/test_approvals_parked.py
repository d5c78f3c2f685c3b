"""A waiting approval holds no turn worker (migration 0013): the turn parks its
session on the request and hands the lease back; the decision or the expiry makes it due
again and the re-run finds the decided request by its idempotency key. A turn parked across a
SIGKILL of the process is tests/contract/test_approvals.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.core.domain import ReplyTarget
from gateway.runtime.gateway import Gateway
from session_store.repos.tools import ToolStore
from session_store.store import Store
from tests.integration.tools.test_approvals_web import (
    RESTART,
    Ops,
    approvals,
    gateway,
    history,
    post,
)
from tests.unit.session_store.test_store import envelope
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import wait_for

TARGET = ReplyTarget(platform="web", scope="local", chat_id="general", thread_id="t1")


async def _ask(gw: Gateway, thread: str, text: str) -> None:
    sent = await post(
        gw,
        "/web/api/channels/general/messages",
        {"text": text, "client_msg_id": thread, "user": "ann"},
    )
    assert sent.status_code == 200


async def _card(gw: Gateway, thread: str) -> dict[str, Any]:
    async def shown() -> Any:
        return [m for m in await history(gw, thread) if m.get("approval")]

    [card] = await wait_for(shown, timeout=15)
    return dict(card)


async def _answers(gw: Gateway, thread: str) -> list[str]:
    """The thread's assistant answers (not the card, not the tool exchange)."""
    return [
        m["content"]
        for m in await history(gw, thread)
        if m["role"] == "assistant" and not m.get("approval")
    ]


async def _session_states(gw: Gateway) -> list[dict[str, Any]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT thread_id, turn_parked_on, turn_owner, turn_requested_seq, turn_done_seq "
            "FROM sessions ORDER BY id"
        )
    return [dict(r) for r in rows]


async def test_one_worker_answers_another_thread_while_an_approval_waits_then_runs_it_once(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    ops = Ops()
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),  # thread A: asks for approval, the turn parks
            Step(text="It is noon."),  # thread B, answered by the only worker meanwhile
            Step(tool_calls=[RESTART]),  # thread A again, after the click: finds the decision
            Step(text="Restarted the api."),
        ]
    )
    async with gateway(
        database_url, fake, tmp_path, prepare=ops.install, GATEWAY_TURN_WORKERS=1
    ) as gw:
        await _ask(gw, "t-a", "please restart the api")
        card = await _card(gw, "t-a")
        [a] = await _session_states(gw)
        assert a["turn_parked_on"] == card["approval"]["id"] and a["turn_owner"] is None
        # the only worker is free: another thread gets its answer while A waits
        await _ask(gw, "t-b", "what time is it?")
        await wait_for(lambda: _answers(gw, "t-b"), timeout=15)
        assert await _answers(gw, "t-b") == ["It is noon."]
        assert ops.runs == [] and await _answers(gw, "t-a") == []
        url = f"/web/api/channels/general/threads/t-a/approvals/{card['approval']['id']}"
        decided = await post(gw, url, {"decision": "approve", "user": "ann"})
        assert decided.json()["outcome"] == "approved"
        await wait_for(lambda: _answers(gw, "t-a"), timeout=15)

        async def settled() -> bool:
            shown = await history(gw, "t-a")
            said = [m for m in shown if m["role"] == "assistant"]
            return all(m.get("delivery") == "sent" for m in said) and all(
                r["card_retired"] for r in await approvals(gw)
            )

        await wait_for(settled, timeout=15, message="answer not sent or card not retired")
        answers = await _answers(gw, "t-a")
        [row] = await approvals(gw)
        states = await _session_states(gw)
        cards = [m for m in await history(gw, "t-a") if m.get("approval")]
    assert ops.runs == [{"service": "api"}]  # once, after the approval
    assert answers == ["Restarted the api."]  # exactly one final answer
    assert row["status"] == "approved" and row["version"] == 2 and row["card_retired"]
    assert len(cards) == 1 and cards[0]["approval"]["status"] == "approved"
    # nothing is parked or due any more
    assert all(
        s["turn_parked_on"] is None and s["turn_done_seq"] >= s["turn_requested_seq"]
        for s in states
    )


@pytest.mark.parametrize("how", ["deny", "expire"])
async def test_a_denied_or_expired_request_gets_one_answer_and_the_tool_never_runs(
    database_url: str, fake: FakeOpenAI, tmp_path: Path, how: str
) -> None:
    ops = Ops()
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),
            Step(tool_calls=[RESTART]),
            Step(text="Not approved, so nothing ran."),
        ]
    )
    seconds = 2 if how == "expire" else 600
    async with gateway(
        database_url,
        fake,
        tmp_path,
        prepare=ops.install,
        GATEWAY_TURN_WORKERS=1,
        GATEWAY_APPROVAL_SECONDS=seconds,
    ) as gw:
        await _ask(gw, "t-no", "restart the api")
        card = await _card(gw, "t-no")
        if how == "deny":
            url = f"/web/api/channels/general/threads/t-no/approvals/{card['approval']['id']}"
            decided = await post(gw, url, {"decision": "deny", "user": "ann"})
            assert decided.json()["outcome"] == "denied"
        # expire: the sweeper expires the request and unparks the session
        await wait_for(lambda: _answers(gw, "t-no"), timeout=20)
        await wait_for(
            lambda: _retired(gw), timeout=10, message="card not retired after the decision"
        )
        answers = await _answers(gw, "t-no")
        [row] = await approvals(gw)
        [state] = await _session_states(gw)
    status = "denied" if how == "deny" else "expired"
    assert ops.runs == [] and answers == ["Not approved, so nothing ran."]
    assert row["status"] == status and state["turn_parked_on"] is None
    follow = fake.turn_requests[-1].body["messages"][-1]
    assert follow["role"] == "tool" and follow["content"].startswith(f"not approved ({status})")


async def _retired(gw: Gateway) -> bool:
    return all(r["card_retired"] for r in await approvals(gw))


async def _open(store: Store, session_id: int | None, key: str) -> str:
    assert session_id is not None
    record, new = await ToolStore(store).open_approval(
        approval_id=key,
        session_id=session_id,
        idempotency_key=key,
        tool_name="ops.restart_service",
        arguments={},
        owner="web:u1",
        approvers=(),
        target=TARGET,
        expires_in=600,
    )
    assert new
    return record.id


async def test_a_parked_session_is_not_claimed_until_its_request_is_decided(
    store: Store,
) -> None:
    tools = ToolStore(store)
    asked = await store.inbox.ingest(envelope("restart the api", message_id="1"), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30, with_pending=10, context_page=64)
    assert claim is not None and claim.parked_seq is None
    approval = await _open(store, asked.session_id, "k1")
    parked = await tools.park_turn(
        session_id=claim.session_id, owner=claim.owner, approval_id=approval, handled_seq=1
    )
    assert parked == "parked"
    # parked: no claim, however often the workers look (with or without the prefetch)
    assert await store.turns.claim_turn(lease_seconds=30) is None
    assert await store.turns.claim_turn(lease_seconds=30, with_pending=10, context_page=64) is None
    # a later message in the same thread waits behind the parked turn (per-session order)
    await store.inbox.ingest(envelope("hurry up", message_id="2"), raw=None)
    assert await store.turns.claim_turn(lease_seconds=30, with_pending=10) is None
    found = await tools.get_approval(approval)
    assert found is not None
    assert await tools.decide_approval(
        approval, version=found.version, status="approved", decided_by="web:u1"
    )
    resumed = await store.turns.claim_turn(lease_seconds=30, with_pending=10, context_page=64)
    assert resumed is not None and resumed.session_id == asked.session_id
    # the re-run knows what the parked run handled: the later message gets the next run
    assert resumed.parked_seq == 1 and resumed.requested_seq == 2


async def test_a_decision_that_lands_before_the_park_leaves_the_session_claimable(
    store: Store,
) -> None:
    """The race: the click decides between the turn's look at the request and its park.
    The park sees the decision (it locks the request first) and parks nothing."""
    tools = ToolStore(store)
    asked = await store.inbox.ingest(envelope("restart the api", message_id="1"), raw=None)
    claim = await store.turns.claim_turn(lease_seconds=30)
    assert claim is not None
    approval = await _open(store, asked.session_id, "k2")
    found = await tools.get_approval(approval)
    assert found is not None
    assert await tools.decide_approval(
        approval, version=found.version, status="denied", decided_by="web:u1"
    )
    outcome = await tools.park_turn(
        session_id=claim.session_id, owner=claim.owner, approval_id=approval, handled_seq=1
    )
    assert outcome == "decided"
    # a lease that is not ours cannot park: the turn learns it lost the session
    other = await _open(store, asked.session_id, "k3")
    lost = await tools.park_turn(
        session_id=claim.session_id, owner=str(claim.owner)[::-1], approval_id=other, handled_seq=1
    )
    assert lost == "lost"
    await store.turns.release_turn(claim)
    again = await store.turns.claim_turn(lease_seconds=30)
    assert again is not None and again.session_id == asked.session_id
