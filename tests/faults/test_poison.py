"""Poison-proof intake: text PostgreSQL cannot store (NUL, lone surrogates) is cleaned at the
one intake boundary, noted in the message's metadata, and never blocks what comes behind it,
on every surface: a poison message followed by a normal one, and the normal one is answered."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from adapters.slack import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.domain import Envelope as Env
from gateway.domain import ReplyTarget, Sender, SessionKey
from gateway.intake import MAX_RAW_BYTES, clean_raw, to_inbound
from session_store.records import InboundMessage
from session_store.store import Store
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.mattermost import connected, make_config
from testsupport.slack import slack_settings
from testsupport.telegram import telegram_settings

POISON = "bad\u0000text \ud800 here"
CLEAN = "badtext \ufffd here"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _sanitized_user_messages(store: Store) -> list[tuple[str, Any]]:
    async with store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT content, metadata->'sanitized' AS s FROM messages "
            "WHERE role = 'user' ORDER BY id"
        )
    return [(r["content"], r["s"]) for r in rows]


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
    result = await store.ingest(item, raw=clean_raw({"text": POISON}, set()))
    assert result.status == "accepted"


async def test_web_chat(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as client:
        body = json.dumps({"text": POISON, "client_msg_id": "p1"})
        bad = await client.post(
            "/web/api/channels/poison/messages",
            content=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        # a person typed it: the web chat refuses it with a reason (issue 13) and keeps it as a
        # dead letter, instead of storing a cleaned copy they did not write
        assert bad.status_code == 422, bad.text
        assert "NUL" in bad.json()["error"] or "surrogate" in bad.json()["error"]
        good = await client.post(
            "/web/api/channels/poison/messages", json={"text": "normal", "client_msg_id": "p2"}
        )
        assert good.status_code == 200

        async def answered() -> list[str]:
            r = await client.get("/web/api/channels/poison/threads/p2/messages")
            return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]

        assert await wait_for(answered, timeout=10) == ["echo: normal"]
        async with gw.store.db.connection() as conn:
            dead = await conn.fetchval(
                "SELECT reason FROM inbound_events WHERE platform = 'web' AND status = 'rejected'"
            )
    assert dead is not None


@pytest.mark.parametrize("mode", ["polling", "webhook"])
async def test_telegram(database_url: str, mode: str) -> None:
    port = _free_port()
    extra: dict[str, Any] = {}
    if mode == "webhook":
        extra = {
            "TELEGRAM_MODE": "webhook",
            "TELEGRAM_WEBHOOK_URL": f"http://127.0.0.1:{port}/telegram/webhook",
            "TELEGRAM_WEBHOOK_SECRET": "poison-secret",
        }
    async with FakeTelegram() as fake:
        adapter = TelegramAdapter(
            telegram_settings(fake, **extra),
            poll_timeout=1,
            backoff_initial=0.05,
            pace=(0.01, 0.01),
        )
        chat = fake.private(fake.user(first_name="Eve\u0000"))
        async with running_gateway(
            database_url, adapters=[adapter], web_chat=False, GATEWAY_HTTP_PORT=port
        ) as gw:
            fake.user_says(chat, POISON)
            fake.user_says(chat, "normal one")
            await fake.wait_until(
                lambda: "echo: normal one" in [s.text for s in fake.sent_to(chat)],
                within=15,
                what="the normal one answered",
            )
            await fake.wait_until(
                lambda: fake.pending_update_ids() == [], within=10, what="both confirmed"
            )
            stored = await _sanitized_user_messages(gw.store)
        texts = [s.text for s in fake.sent_to(chat)]
    # both stored (the poison one cleaned); the turn after them answered the newest
    assert [c for c, _ in stored] == [CLEAN, "normal one"]
    assert texts[-1] == "echo: normal one" and len(texts) <= 2
    if mode == "webhook":
        assert all(status == 200 for _, status in fake.webhook_pushes)


async def test_slack_events(database_url: str) -> None:
    async with FakeSlack() as fake:
        fake.add_channel("C0GENERAL")
        adapter = SlackAdapter(slack_settings(fake))
        async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
            fake.events_url = f"{gw.url}slack/events"
            bad = await fake.user_posts("C0GENERAL", f"<@U0BOT> {POISON}")
            good = await fake.user_posts("C0GENERAL", "<@U0BOT> normal one")
            await wait_for(
                lambda: [m for m in fake.bot_posts("C0GENERAL") if m.thread_ts == good.ts],
                timeout=10,
            )
            stored = await _sanitized_user_messages(gw.store)
    assert all(a.status == 200 for d in bad.deliveries for a in d.attempts)
    assert [c for c, _ in stored] == [CLEAN, "normal one"]
    replies = {m.thread_ts: m.text for m in fake.bot_posts("C0GENERAL")}
    assert replies[good.ts] == "echo: normal one"


async def test_mattermost(database_url: str) -> None:
    async with FakeMattermost() as fake:
        adapter = MattermostAdapter(make_config(fake))
        async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
            await connected(adapter)
            await fake.user_posts(fake.town_square, POISON, mention_bot=True)
            good = await fake.user_posts(fake.town_square, "normal one", mention_bot=True)
            await wait_for(
                lambda: fake.posts_in(fake.town_square, root_id=good["id"], by=fake.bot),
                timeout=10,
            )
            stored = await _sanitized_user_messages(gw.store)
    assert [c for c, _ in stored][-1] == "@gatewaybot normal one"
    assert CLEAN in stored[0][0]


async def test_an_item_postgresql_refuses_for_good_becomes_a_dead_letter(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message id too big for the inbox's unique index (sqlstate 54000) can never be stored:
    intake keeps a rejected dead letter with the reason, and the surface moves on. (Intake
    refuses ids over ``MAX_ID_BYTES`` before the database sees them; raised here so that the
    database's own refusal is what is tested.)"""
    import secrets

    from gateway import intake

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
