"""The live event hub shared by all replicas: every ``publish`` reaches this replica's
subscribers at once and, through PostgreSQL ``NOTIFY`` (``session_store.repos.live``), the
subscribers of every other replica. A web chat page connected to replica B sees the reply
that replica A's delivery worker sent.

Events are hints: a page reloads the thread's history on any of them, so an event too big
for a notification travels slimmed to its type and id, and a lost notification costs at most
the 10 s fallback refresh of the page.

Only what another replica's pages follow is sent. Each replica says which topics its pages
follow (``follows``): when a topic gets its first page, when another replica says hello, and
every ``INTEREST_SECONDS``. Sending every event to every replica cost a ``NOTIFY`` per batch
and, in each listening replica, a transaction of PostgreSQL's to read it: with three replicas
1.5-1.9 transactions per message that no page wanted."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog

from gateway.core.errors import StoreError
from gateway.core.hub import Broadcast
from gateway.core.lifecycle.supervisor import pause
from session_store.repos.live import MAX_PAYLOAD_BYTES, LiveChannel

log = structlog.get_logger(__name__)

#: events waiting to be sent to the other replicas; beyond this they are dropped (hints)
QUEUE_SIZE = 1024
#: notifications sent in one statement at most
BATCH = 64
#: how long "another replica listens" (or "none does") is believed before it is asked again
PEERS_SECONDS = 2.0
#: the topic of a replica's hello (no page subscribes to it; older replicas ignore it)
HELLO_TOPIC = ""
#: the keys an over-long event keeps
SLIM_KEYS = ("type", "id", "name", "mime_type")
#: how often a replica repeats the topics its pages follow: a lost notification heals, and a
#: topic whose last page left stops being sent to it
INTEREST_SECONDS = 5.0
#: a replica's follows are believed this many announcements long (then it is taken as gone)
INTEREST_ROUNDS = 3


class ReplicatedBroadcast(Broadcast):
    def __init__(self, channel: LiveChannel, *, queue_size: int = 256) -> None:
        super().__init__(queue_size)
        self._channel = channel
        self.origin = uuid.uuid4().hex
        self._outgoing: asyncio.Queue[str] = asyncio.Queue(QUEUE_SIZE)
        #: whether another replica listens, and until when that is believed (a lone
        #: replica sends no NOTIFY; a replica that starts listening says hello, so the others
        #: know at once, and the belief is rechecked every PEERS_SECONDS while events flow)
        self._peers = True
        self._peers_until = 0.0
        #: what each other replica's pages follow (None: everything), by origin, and until
        #: when that is believed
        self._follows: dict[str, tuple[frozenset[str] | None, float]] = {}

    def _alone(self) -> bool:
        """No other replica listened when last asked, and that is still believed."""
        return not self._peers and time.monotonic() < self._peers_until

    def publish(self, topic: str, event: dict[str, Any]) -> None:
        super().publish(topic, event)  # this replica's subscribers, at once
        if self._alone():
            return  # no other replica listens: nothing to encode
        if not self.followed_elsewhere(topic):
            return  # no page of another replica follows it
        self._send(topic, event)

    def followed_elsewhere(self, topic: str) -> bool:
        """Whether another replica's page may follow ``topic``: one of them said so, or said
        everything, or none has said anything yet (a replica that says nothing is followed in
        full, as before replicas said what they follow)."""
        if not self._follows:
            return True
        now = time.monotonic()
        for origin, (topics, until) in list(self._follows.items()):
            if until < now:
                del self._follows[origin]  # not heard from for rounds: gone
            elif topics is None or topic in topics:
                return True
        return not self._follows

    @asynccontextmanager
    async def subscribe(self, topic: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        first = topic not in self._subs
        async with super().subscribe(topic) as queue:
            if first:
                self._announce()  # the other replicas send it from now on
            yield queue

    def _announce(self) -> None:
        """Tell the other replicas which topics this one's pages follow, all of them at once.
        When they do not fit in one notification it travels slimmed to its type, without
        ``topics``, which the others read as everything (``_heard``)."""
        if self._alone():
            return
        self._send(HELLO_TOPIC, {"type": "follows", "topics": sorted(self._subs)})

    def _send(self, topic: str, event: dict[str, Any]) -> None:
        """Queue ``event`` for the other replicas (dropped when the queue is full: events
        are hints)."""
        payload = self._payload(topic, event)
        if payload is not None and not self._outgoing.full():
            self._outgoing.put_nowait(payload)

    def _heard(self, origin: str, event: dict[str, Any]) -> None:
        until = time.monotonic() + INTEREST_SECONDS * INTEREST_ROUNDS
        if event.get("type") == "follows":
            topics = event.get("topics")
            follows = (
                frozenset(t for t in topics if isinstance(t, str))
                if isinstance(topics, list)
                else None  # everything
            )
            self._follows[origin] = (follows, until)
            return
        # hello: a replica started listening; until it says what it follows, everything (what
        # it said already stands: its first follows may travel before its listener's hello)
        self._peers = True
        self._peers_until = time.monotonic() + PEERS_SECONDS
        self._follows.setdefault(origin, (None, until))
        self._announce()  # and it learns what ours follow

    def _payload(self, topic: str, event: dict[str, Any]) -> str | None:
        for body in (event, {k: event[k] for k in SLIM_KEYS if k in event}):
            payload = json.dumps({"o": self.origin, "t": topic, "e": body}, default=str)
            if len(payload.encode("utf-8")) <= MAX_PAYLOAD_BYTES:
                return payload
        return None

    def received(self, payload: str) -> None:
        """A notification from any replica (our own come back too and are skipped)."""
        try:
            data = json.loads(payload)
            origin, topic, event = data["o"], data["t"], data["e"]
        except (ValueError, KeyError, TypeError):
            log.warning("live_payload_unreadable")
            return
        if origin == self.origin or not isinstance(topic, str) or not isinstance(event, dict):
            return
        if topic == HELLO_TOPIC:
            self._heard(origin, event)
            return
        super().publish(topic, event)

    async def _anyone_else(self) -> bool:
        if self._channel.listener_pid is None:
            # this replica's own listener is not up yet, and could not be told from another
            # one's: send, and ask again once it is
            return True
        if time.monotonic() >= self._peers_until:
            try:
                self._peers = await self._channel.others_listening()
            except StoreError as exc:
                log.debug("live_peers_unknown", error=str(exc))
                self._peers = True  # unknown: send, as before
            self._peers_until = time.monotonic() + PEERS_SECONDS
        return self._peers

    async def run(self, stopping: asyncio.Event) -> None:
        """Listen for the other replicas and send ours, until ``stopping`` is set."""
        hello = json.dumps({"o": self.origin, "t": HELLO_TOPIC, "e": {"type": "hello"}})
        listener = asyncio.create_task(
            self._channel.listen(self.received, stopping, hello=hello), name="live-listen"
        )
        announcer = asyncio.create_task(self._announcing(stopping), name="live-follows")
        try:
            while not stopping.is_set():
                getter = asyncio.ensure_future(self._outgoing.get())
                stop = asyncio.ensure_future(stopping.wait())
                done, _ = await asyncio.wait({getter, stop}, return_when=asyncio.FIRST_COMPLETED)
                stop.cancel()
                if getter not in done:
                    getter.cancel()
                    break
                # everything queued meanwhile goes in the same transaction
                batch = [getter.result()]
                while len(batch) < BATCH and not self._outgoing.empty():
                    batch.append(self._outgoing.get_nowait())
                try:
                    if not await self._anyone_else():
                        continue  # this replica's subscribers had them at once
                    if len(batch) == 1:
                        await self._channel.notify(batch[0])
                    else:
                        await self._channel.notify_many(batch)
                except (StoreError, ValueError) as exc:
                    log.debug("live_notify_failed", error=str(exc))
        finally:
            if not stopping.is_set():
                listener.cancel()  # run was cancelled: so is the listener
            announcer.cancel()
            await asyncio.gather(listener, announcer, return_exceptions=True)

    async def _announcing(self, stopping: asyncio.Event) -> None:
        """Say what this replica's pages follow every ``INTEREST_SECONDS``."""
        while not stopping.is_set():
            self._announce()
            await pause(INTEREST_SECONDS, stopping)
