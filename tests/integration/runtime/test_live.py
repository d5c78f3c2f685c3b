"""Live events across replicas: what one gateway publishes reaches the web chat streams of
every gateway on the same database (LISTEN/NOTIFY), exactly once each, and an event too big
for a notification arrives slimmed to a hint."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx

from gateway.inbound.intake import live_topic
from gateway.runtime.gateway import Gateway
from gateway.runtime.live import ReplicatedBroadcast
from session_store.repos.live import CHANNEL
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
                assert not [p for p in heard if '"t1"' in p]
                async with running_gateway(database_url) as b, collecting(b.live, "t1") as at_b:
                    await asyncio.sleep(0.2)  # b listens and said hello
                    a.live.publish("t1", {"type": "reply", "id": "gw-2"})
                    await wait_for(lambda: at_b, timeout=10)
                    assert at_b == [{"type": "reply", "id": "gw-2"}]
                    assert [p for p in heard if '"t1"' in p]
    finally:
        await spy.close()
