"""Live events across replicas: what one gateway publishes reaches the web chat streams of
every gateway on the same database (LISTEN/NOTIFY), exactly once each, and an event too big
for a notification arrives slimmed to a hint."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

import gateway.runtime.live as live_module
from gateway.inbound.intake import live_topic
from gateway.runtime.gateway import Gateway
from gateway.runtime.live import ReplicatedBroadcast
from session_store.repos.live import CHANNEL, LISTENER_NAME
from session_store.values import SessionKey
from testsupport.harness import running_gateway, wait_for


@contextlib.asynccontextmanager
async def two_replicas(database_url: str) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with running_gateway(database_url) as a, running_gateway(database_url) as b:
        yield a, b


@contextlib.asynccontextmanager
async def collecting(hub: ReplicatedBroadcast, topic: str) -> AsyncIterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def pump(queue: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            seen.append(await queue.get())

    async with hub.subscribe(topic) as queue:
        task = asyncio.create_task(pump(queue))
        try:
            yield seen
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_an_event_reaches_every_replica_once(database_url: str) -> None:
    async with two_replicas(database_url) as (a, b):
        assert isinstance(a.live, ReplicatedBroadcast) and isinstance(b.live, ReplicatedBroadcast)
        async with collecting(a.live, "t1") as at_a, collecting(b.live, "t1") as at_b:
            await asyncio.sleep(0.2)  # both listeners are up (LISTEN runs at start)
            a.live.publish("t1", {"type": "reply", "id": "gw-1", "text": "hello"})
            await wait_for(lambda: at_b, timeout=10)  # from a, through the database
            big = "x" * 20_000
            b.live.publish("t1", {"type": "reply", "id": "gw-2", "text": big})
            await wait_for(lambda: len(at_a) == 2, timeout=10)
            await asyncio.sleep(0.5)  # any echo of our own notification would arrive by now
        # b: a's event from the database, then its own big event locally, in full
        assert at_b == [
            {"type": "reply", "id": "gw-1", "text": "hello"},
            {"type": "reply", "id": "gw-2", "text": big},
        ]
        # a's own event once (no echo), b's big event slimmed to a hint
        assert at_a == [
            {"type": "reply", "id": "gw-1", "text": "hello"},
            {"type": "reply", "id": "gw-2"},
        ]


async def test_a_web_chat_reply_reaches_the_streams_of_both_replicas(database_url: str) -> None:
    async with two_replicas(database_url) as (a, b):
        topic = live_topic(
            SessionKey(platform="web", scope="local", chat_id="general", thread_id="th1")
        )
        async with collecting(a.live, topic) as at_a, collecting(b.live, topic) as at_b:
            await asyncio.sleep(0.2)
            async with httpx.AsyncClient(base_url=a.url) as client:
                sent = await client.post(
                    "/web/api/channels/general/messages",
                    json={"text": "hi both", "client_msg_id": "th1"},
                )
                assert sent.status_code == 200, sent.text

            def replies(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
                return [e for e in seen if e.get("type") == "reply"]

            await wait_for(lambda: replies(at_a) and replies(at_b), timeout=15)
            await asyncio.sleep(0.5)
        assert len(replies(at_a)) == 1 and len(replies(at_b)) == 1
        assert replies(at_a)[0]["id"] == replies(at_b)[0]["id"]


async def test_a_lone_replica_notifies_nobody_until_another_replica_listens(
    database_url: str,
) -> None:
    """a NOTIFY per batch of events was a transaction that no one received when the
    gateway runs alone. A replica that starts listening says hello, and from then on the
    first one's events reach it through the database."""
    heard: list[str] = []
    spy = await asyncpg.connect(database_url)  # a plain listener, not a replica
    await spy.add_listener(CHANNEL, lambda _c, _p, _ch, payload: heard.append(payload))
    try:
        async with running_gateway(database_url) as a:
            assert isinstance(a.live, ReplicatedBroadcast)
            async with collecting(a.live, "t1") as at_a:
                await asyncio.sleep(0.2)
                a.live.publish("t1", {"type": "reply", "id": "gw-1"})
                await wait_for(lambda: at_a, timeout=10)  # its own subscribers, at once
                await asyncio.sleep(0.5)
                # (what its pages follow it may say before it knows it is alone)
                assert not [p for p in heard if '"gw-1"' in p]
                async with running_gateway(database_url) as b, collecting(b.live, "t1") as at_b:
                    await asyncio.sleep(0.2)  # b listens and said hello
                    a.live.publish("t1", {"type": "reply", "id": "gw-2"})
                    await wait_for(lambda: at_b, timeout=10)
                    assert at_b == [{"type": "reply", "id": "gw-2"}]
                    assert [p for p in heard if '"gw-2"' in p]
    finally:
        await spy.close()


async def test_only_what_another_replicas_pages_follow_is_sent_to_it(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each replica says which topics its pages follow; an event nobody elsewhere follows
    costs no NOTIFY (nor, in every listening replica, PostgreSQL's transaction to read it),
    and a topic whose last page left stops being sent once its replica says so again."""
    monkeypatch.setattr(live_module, "INTEREST_SECONDS", 0.3)
    heard: list[dict[str, Any]] = []
    spy = await asyncpg.connect(database_url)  # a plain listener, not a replica
    await spy.add_listener(CHANNEL, lambda _c, _p, _ch, payload: heard.append(json.loads(payload)))

    def sent(topic: str) -> list[dict[str, Any]]:
        return [n for n in heard if n["t"] == topic]

    def follows(origin: str) -> list[list[str] | None]:
        return [
            n["e"]["topics"] for n in heard if n["o"] == origin and n["e"].get("type") == "follows"
        ]

    try:
        async with two_replicas(database_url) as (a, b):
            assert isinstance(a.live, ReplicatedBroadcast) and isinstance(
                b.live, ReplicatedBroadcast
            )
            await wait_for(lambda: [] in follows(b.live.origin), timeout=10)
            await asyncio.sleep(0.1)  # a heard it too
            a.live.publish("nobody", {"type": "reply", "id": "gw-1"})
            await asyncio.sleep(0.5)
            assert sent("nobody") == []
            async with collecting(b.live, "followed") as at_b:
                await wait_for(lambda: ["followed"] in follows(b.live.origin), timeout=10)
                await asyncio.sleep(0.1)
                a.live.publish("followed", {"type": "reply", "id": "gw-2"})
                a.live.publish("nobody", {"type": "reply", "id": "gw-3"})
                await wait_for(lambda: at_b, timeout=10)
            assert at_b == [{"type": "reply", "id": "gw-2"}]
            # the page left: once b says so, a stops sending the topic
            left = len(follows(b.live.origin))
            await wait_for(lambda: len(follows(b.live.origin)) > left + 1, timeout=10)
            a.live.publish("followed", {"type": "reply", "id": "gw-4"})
            await asyncio.sleep(0.5)
            assert [n["e"]["id"] for n in sent("followed")] == ["gw-2"]
            assert sent("nobody") == []
    finally:
        await spy.close()


async def test_a_replica_that_never_says_what_it_follows_gets_everything(
    database_url: str,
) -> None:
    """A replica that only says hello (one from before replicas said what they follow) is
    sent every event, as before, beside one that follows nothing."""
    heard: list[dict[str, Any]] = []
    async with two_replicas(database_url) as (a, b):
        assert isinstance(a.live, ReplicatedBroadcast)
        assert isinstance(b.live, ReplicatedBroadcast)
        # a listener as a replica names it, so the gateways count it as another replica
        older = await asyncpg.connect(
            database_url, server_settings={"application_name": LISTENER_NAME}
        )
        try:
            await older.add_listener(
                CHANNEL, lambda _c, _p, _ch, payload: heard.append(json.loads(payload))
            )
            origin = b.live.origin
            await wait_for(
                lambda: [n for n in heard if n["o"] == origin and n["e"]["type"] == "follows"],
                timeout=10,
            )
            await asyncio.sleep(0.1)  # a heard b follow nothing
            a.live.publish("t1", {"type": "reply", "id": "gw-1"})
            await asyncio.sleep(0.3)
            assert not [n for n in heard if n["t"] == "t1"]
            hello = json.dumps({"o": "older", "t": "", "e": {"type": "hello"}})
            await older.execute("SELECT pg_notify($1, $2)", CHANNEL, hello)
            await asyncio.sleep(0.3)
            a.live.publish("t1", {"type": "reply", "id": "gw-2"})
            await wait_for(lambda: [n for n in heard if n["t"] == "t1"], timeout=10)
            assert [n["e"]["id"] for n in heard if n["t"] == "t1"] == ["gw-2"]
        finally:
            await older.close()


async def test_a_replica_following_more_than_a_notification_holds_is_sent_everything(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What does not fit in one NOTIFY travels slimmed to its type: the others read a
    ``follows`` without topics as everything."""
    monkeypatch.setattr(live_module, "INTEREST_SECONDS", 0.3)
    heard: list[dict[str, Any]] = []
    spy = await asyncpg.connect(database_url)
    await spy.add_listener(CHANNEL, lambda _c, _p, _ch, payload: heard.append(json.loads(payload)))
    try:
        async with two_replicas(database_url) as (a, b), contextlib.AsyncExitStack() as pages:
            assert isinstance(a.live, ReplicatedBroadcast)
            assert isinstance(b.live, ReplicatedBroadcast)
            for n in range(200):  # 200 topics of 60 characters: over 7,900 bytes
                await pages.enter_async_context(b.live.subscribe(f"{n:03d}-" + "x" * 56))
            origin = b.live.origin
            await wait_for(
                lambda: [n for n in heard if n["o"] == origin and n["e"] == {"type": "follows"}],
                timeout=10,
            )
            await asyncio.sleep(0.1)  # a heard it too
            a.live.publish("nobody", {"type": "reply", "id": "gw-1"})
            await wait_for(lambda: [n for n in heard if n["t"] == "nobody"], timeout=10)
    finally:
        await spy.close()
