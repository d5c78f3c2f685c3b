"""The live event hub shared by all replicas: every ``publish`` reaches this replica's
subscribers at once and, through PostgreSQL ``NOTIFY`` (``session_store.repos.live``), the
subscribers of every other replica. A web chat page connected to replica B sees the reply
that replica A's delivery worker sent.

Events are hints: a page reloads the thread's history on any of them, so an event too big
for a notification travels slimmed to its type and id, and a lost notification costs at most
the 10 s fallback refresh of the page."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import structlog

from gateway.core.errors import StoreError
from gateway.core.hub import Broadcast
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

    def publish(self, topic: str, event: dict[str, Any]) -> None:
        super().publish(topic, event)  # this replica's subscribers, at once
        if not self._peers and time.monotonic() < self._peers_until:
            return  # no other replica listens: nothing to encode
        payload = self._payload(topic, event)
        if payload is not None and not self._outgoing.full():
            self._outgoing.put_nowait(payload)

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
            self._peers = True  # another replica started listening
            self._peers_until = time.monotonic() + PEERS_SECONDS
            return
        super().publish(topic, event)

    async def _anyone_else(self) -> bool:
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
            await asyncio.gather(listener, return_exceptions=True)
