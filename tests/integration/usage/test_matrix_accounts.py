"""Budgets read a Matrix person right, though a Matrix account holds ':' in its scope (the
homeserver, with a port) and in its user id (``@ann:example.org``): the person's spend follows
every account linked to it, and a turn running for them in a Matrix room (whose id holds
``:`` too) is reserved against the person and against that room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gateway.core.domain import Envelope, ReplyTarget, Sender, SessionKey
from gateway.inbound.intake import to_inbound
from session_store.repos.usage import place_of
from session_store.store import Store

HOMESERVER = "matrix.example.org:8448"
ANN = "@ann:example.org:8448"
ACCOUNT = f"matrix:{HOMESERVER}:{ANN}"


async def _asks(store: Store, room: str, n: int) -> tuple[SessionKey, int]:
    """Ann asks in ``room``'s thread; returns the key and the session id."""
    key = SessionKey(platform="matrix", scope=HOMESERVER, chat_id=room, thread_id="$root")
    target = ReplyTarget(
        platform="matrix", scope=HOMESERVER, chat_id=room, thread_id="$root",
        reply_to_message_id=f"$e{n}",
    )  # fmt: skip
    envelope = Envelope(
        key=key, target=target, message_id=f"$e{n}", text="how much?", sender=Sender(id=ANN)
    )
    stored = await store.inbox.ingest(to_inbound(envelope), raw=None)
    assert stored.session_id is not None
    return key, stored.session_id


async def test_a_matrix_persons_spend_and_running_turns_are_counted(store: Store) -> None:
    here, asking = await _asks(store, "!room1:example.org:8448", 1)
    there, running = await _asks(store, "!room2:example.org:8448", 2)
    person = await store.people.link(ACCOUNT, "web:local:ann")
    async with store.db.connection() as conn:
        for account, cost in ((ACCOUNT, "0.25"), ("web:local:ann", "0.5"), ("web:local:x", "9")):
            await conn.execute(
                "INSERT INTO usage_ledger (account, person_id, place, model, kind, cost) "
                "VALUES ($1, $2, $3, 'm', 'answer', $4::numeric)",
                account,
                person if account != "web:local:x" else None,
                place_of(here),
                cost,
            )
        # the turn in the second room is being answered right now
        await conn.execute(
            "UPDATE sessions SET turn_owner = gen_random_uuid(),"
            " turn_lease_until = now() + interval '1 minute' WHERE id = $1",
            running,
        )
    now = datetime.now(UTC)
    month = now - timedelta(days=1)
    state = await store.usage.budget_state(
        account=ACCOUNT, place=place_of(there), day_start=month, month_start=month,
        session_id=asking,
    )  # fmt: skip
    assert state.person_id == person
    assert state.person_day_cost == Decimal("0.75")  # her Matrix and web accounts, not x's
    assert (state.person_running, state.place_running, state.total_running) == (1, 1, 1)
    # the first room: its spend, and no turn running there
    state = await store.usage.budget_state(
        account=ACCOUNT, place=place_of(here), day_start=month, month_start=month,
        session_id=running,
    )  # fmt: skip
    assert state.place_month_cost == Decimal("9.75") and state.place_running == 0
