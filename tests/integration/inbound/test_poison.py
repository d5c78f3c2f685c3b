"""Poison-proof intake: text PostgreSQL cannot store (NUL, lone surrogates) is cleaned at the
one intake boundary and noted in the message's metadata; what PostgreSQL refuses for good is a
dead letter. That it never blocks what comes behind it, on every surface, is the contract
suite's (tests/contract/test_poison.py)."""

from __future__ import annotations

import pytest

from gateway.core.domain import Envelope as Env
from gateway.core.domain import ReplyTarget, Sender, SessionKey
from gateway.inbound.cleaning import MAX_RAW_BYTES, clean_raw
from gateway.inbound.intake import to_inbound
from session_store.records import InboundMessage
from session_store.store import Store
from testsupport.harness import running_gateway

POISON = "bad\u0000text \ud800 here"
CLEAN = "badtext \ufffd here"


async def test_the_boundary_cleans_text_names_numbers_and_the_raw_payload(store: Store) -> None:
    key = SessionKey(platform="web", scope="local", chat_id="c\u0000", thread_id="t\ud83d")
    env = Env(
        key=key,
        target=ReplyTarget(platform="web", scope="local", chat_id="c\u0000", thread_id="t"),
        message_id="m1",
        text=POISON,
        sender=Sender(id="u\u0000", name="Eve \udfff"),
        metadata={"n": float("nan"), "big": 10**2000},
    )
    item = to_inbound(env)
    assert isinstance(item, InboundMessage)
    assert item.content == CLEAN and item.sender_name == "Eve \ufffd"
    assert item.key.chat_id == "c" and item.key.thread_id == "t\ufffd"
    assert item.metadata["n"] == "nan" and item.metadata["big"].startswith("<integer of")
    assert item.metadata["sanitized"] == ["nul_removed", "number_as_text", "surrogates_replaced"]
    notes: set[str] = set()
    raw = clean_raw({"text": POISON, "pad": "x" * (MAX_RAW_BYTES + 10)}, notes)
    assert raw is not None and raw["truncated"] is True and len(raw["head"]) < MAX_RAW_BYTES
    assert notes == {"nul_removed", "surrogates_replaced", "raw_truncated"}
    result = await store.inbox.ingest(item, raw=clean_raw({"text": POISON}, set()))
    assert result.status == "accepted"


async def test_an_item_postgresql_refuses_for_good_becomes_a_dead_letter(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message id too big for the inbox's unique index (sqlstate 54000) can never be stored:
    intake keeps a rejected dead letter with the reason, and the surface moves on. (Intake
    refuses ids over ``MAX_ID_BYTES`` before the database sees them; raised here so that the
    database's own refusal is what is tested.)"""
    import secrets

    from gateway.inbound import intake

    monkeypatch.setattr(intake, "MAX_ID_BYTES", 10**6)
    huge_id = secrets.token_hex(6000)  # 12,000 incompressible characters
    async with running_gateway(database_url) as gw:
        key = SessionKey(platform="web", scope="local", chat_id="c", thread_id="t")
        target = ReplyTarget(platform="web", scope="local", chat_id="c", thread_id="t")
        poison = Env(key=key, target=target, message_id=huge_id, text="hi", sender=Sender(id="u"))
        outcome = await gw.intake.submit(poison, raw={"id": huge_id})
        assert outcome.status == "rejected"
        normal = Env(key=key, target=target, message_id="m2", text="next", sender=Sender(id="u"))
        assert (await gw.intake.submit(normal, raw=None)).status == "accepted"
        async with gw.store.db.connection() as conn:
            row = await conn.fetchrow(
                "SELECT status, reason, payload FROM inbound_events WHERE status = 'rejected'"
            )
    assert row["reason"] == "cannot be stored: 54000"
    assert row["payload"] == {"unstorable": True, "sqlstate": "54000"}


async def test_an_oversized_sender_id_is_a_dead_letter_not_a_session_that_fails_every_turn(
    database_url: str,
) -> None:
    """Fuzzing found a 3 KB Slack user id stored with its message, after which every turn of
    that session failed on the participants index. Ids no platform sends are refused at
    intake, with the reason, and the next message is answered."""
    async with running_gateway(database_url) as gw:
        key = SessionKey(platform="web", scope="local", chat_id="c", thread_id="t")
        target = ReplyTarget(platform="web", scope="local", chat_id="c", thread_id="t")
        poison = Env(
            key=key, target=target, message_id="m1", text="hi", sender=Sender(id="u" * 3000)
        )
        assert (await gw.intake.submit(poison, raw=None)).status == "rejected"
        normal = Env(key=key, target=target, message_id="m2", text="next", sender=Sender(id="u"))
        assert (await gw.intake.submit(normal, raw=None)).status == "accepted"
        async with gw.store.db.connection() as conn:
            reason = await conn.fetchval(
                "SELECT reason FROM inbound_events WHERE status = 'rejected'"
            )
    assert reason == "sender id longer than 200 bytes"
