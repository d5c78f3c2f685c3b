"""What the inbox writes per event, and how often the raw payload is encoded: a platform's
notices about a conversation (Telegram's forum topic created, Mattermost's system posts) are
counted, not stored (a transaction each for nothing); any other ignored event still is; the
raw payload of a message is JSON-encoded once, where its size is measured, and that text is
what PostgreSQL stores."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.core.domain import Envelope, Ignored, ReplyTarget, Sender, SessionKey
from gateway.inbound.cleaning import clean_raw
from gateway.inbound.intake import to_inbound
from session_store.store import Store
from testsupport.harness import running_gateway


async def _stored(gw: Any) -> list[tuple[str, str | None]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch("SELECT status, reason FROM inbound_events ORDER BY id")
    return [(r["status"], r["reason"]) for r in rows]


async def test_a_platforms_notice_is_counted_not_stored_other_ignored_events_are(
    database_url: str,
) -> None:
    async with running_gateway(database_url) as gw:
        topic = Ignored(
            platform="telegram", reason="service message: forum_topic_created", event_id="1"
        )
        joined = Ignored(platform="mattermost", reason="system post system_join_channel")
        other = Ignored(platform="slack", reason="event type team_join", event_id="Ev1")
        for notice in (topic, joined):
            outcome = await gw.intake.submit(notice, raw={"update_id": 1})
            assert (outcome.status, outcome.reason) == ("ignored", notice.reason)
        assert await _stored(gw) == []
        assert (await gw.intake.submit(other, raw={"x": 1})).status == "ignored"
        assert await _stored(gw) == [("ignored", "event type team_join")]


async def test_the_raw_payload_is_encoded_once_and_stored_as_encoded(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = SessionKey(platform="web", scope="local", chat_id="c", thread_id="t")
    env = Envelope(
        key=key,
        target=ReplyTarget(platform="web", scope="local", chat_id="c", thread_id="t"),
        message_id="m1",
        text="hello",
        sender=Sender(id="u"),
    )
    raw = {"text": "hello", "nested": {"ts": "1.2", "list": [1, 2.5, None, True]}}
    calls: list[Any] = []
    dumps = json.dumps

    def counted(value: Any, *args: Any, **kwargs: Any) -> str:
        if isinstance(value, dict) and "nested" in value:
            calls.append(value)
        return dumps(value, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", counted)
    result = await store.inbox.ingest(to_inbound(env), raw=clean_raw(raw, set()))
    monkeypatch.setattr(json, "dumps", dumps)
    assert result.status == "accepted"
    assert len(calls) == 1  # measured and stored from one encoding
    async with store.db.connection() as conn:
        stored = await conn.fetchval("SELECT payload FROM inbound_events")
    assert stored == raw
