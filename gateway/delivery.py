"""The delivery worker: claims due outbox rows, paces per chat, sends through the platform's
transport, and records the receipt or the failure on the row.

Policy lives here once for every platform: ordering (a part is claimable only after the parts
before it in its session), pacing, retries with backoff that honor a platform's retry-after,
a bounded number of attempts, and visible permanent failures. Transports only do the raw send.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from gateway.errors import DeliveryError, StoreError
from gateway.files import send_part
from gateway.hub import Signal
from gateway.metrics import Metrics
from gateway.ports import Transport
from session_store.records import DeliveryRecord
from session_store.store import Store

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliverySettings:
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    max_attempts: int = 8
    workers: int = 8
    max_backoff: float = 300.0


class Pacer:
    """Spaces sends sharing a key (a chat) without blocking other keys. Bounded: entries
    whose spacing has long passed are dropped once the map grows."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self._next: OrderedDict[str, float] = OrderedDict()
        self._max_keys = max_keys

    def reserve(self, rules: list[tuple[str, float]]) -> float:
        """Reserve the next slot for a send under ``rules``; return seconds to wait first."""
        now = time.monotonic()
        start = max([now, *(self._next.get(key, now) for key, _ in rules)])
        for key, interval in rules:
            self._next[key] = start + interval
            self._next.move_to_end(key)
        while len(self._next) > self._max_keys:
            key, when = next(iter(self._next.items()))
            if when > now:
                break
            del self._next[key]
        return start - now


def backoff(attempt: int, cap: float) -> float:
    """Exponential backoff with full jitter: 1, 2, 4, ... seconds, capped."""
    base: float = min(cap, 2.0 ** max(attempt - 1, 0))
    return float(base / 2 + random.random() * base / 2)


class DeliveryWorker:
    def __init__(
        self,
        store: Store,
        transports: Mapping[str, Transport],
        *,
        metrics: Metrics,
        wake: Signal,
        settings: DeliverySettings,
    ) -> None:
        self._store = store
        self._transports = transports
        self._metrics = metrics
        self._wake = wake
        self._settings = settings
        self._pacer = Pacer()
        self._platforms = sorted(transports)

    async def run(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._recovery(stopping), name="delivery-recovery")
            for n in range(self._settings.workers):
                group.create_task(self._worker(stopping), name=f"delivery-worker-{n}")

    def _resend_safe_after(self, transport: Transport, seconds: float) -> bool:
        """Can a send be repeated ``seconds`` after it may have reached the platform without
        posting twice? Only with an idempotency key the platform remembers that long
        (``resend_window``: Mattermost keeps a pending_post_id for 30 s; None = forever)."""
        if not transport.idempotent:
            return False
        window = transport.resend_window
        return window is None or seconds < window

    async def recover(self) -> None:
        # a send found expired has been in flight for at least the delivery lease
        lease = self._settings.lease_seconds
        idempotent = [p for p, t in self._transports.items() if self._resend_safe_after(t, lease)]
        other = [p for p in self._transports if p not in idempotent]
        requeued, failed = await self._store.recover_expired_sends(
            idempotent_platforms=idempotent, other_platforms=other
        )
        if requeued or failed:
            log.warning("expired_sends_recovered", requeued=requeued, failed_ambiguous=failed)
            self._wake.set()

    async def _recovery(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.recover()
            except StoreError as exc:
                log.warning("delivery_recovery_failed", error=str(exc))
            interval = max(self._settings.lease_seconds / 4, self._settings.poll_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)

    async def _worker(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                claimed = await self._store.claim_deliveries(
                    platforms=self._platforms, lease_seconds=self._settings.lease_seconds
                )
            except StoreError as exc:
                log.warning("delivery_claim_failed", error=str(exc))
                await asyncio.sleep(self._settings.poll_seconds)
                continue
            if not claimed:
                await self._wake.wait(self._settings.poll_seconds)
                continue
            self._wake.set()  # more may be due: let an idle sibling look too
            for delivery in claimed:
                await self.deliver(delivery)

    async def deliver(self, delivery: DeliveryRecord) -> None:
        transport = self._transports[delivery.platform]
        target = delivery.target
        bound = log.bind(
            platform=target.platform,
            chat_id=target.chat_id,
            thread_id=target.thread_id,
            session_id=delivery.session_id,
            seq_no=delivery.seq_no,
            part_no=delivery.part_no,
            delivery_id=delivery.id,
        )
        wait = self._pacer.reserve(list(transport.pace(target)))
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            result = await send_part(  # a message, or an upload for a file part
                transport, target, delivery.content, idempotency_key=f"gw-{delivery.id}"
            )
        except DeliveryError as exc:
            await self._failed(delivery, transport, exc, bound)
            return
        except Exception as exc:  # noqa: BLE001 - a transport bug must not kill the worker:
            # it is recorded on the row and retried like a transient failure
            bound.exception("delivery_transport_crashed")
            await self._failed(
                delivery, transport, DeliveryError(f"{type(exc).__name__}: {exc}"), bound
            )
            return
        await self._store.mark_sent(delivery.id, result.platform_message_id)
        self._metrics.deliveries.labels(delivery.platform, "sent").inc()
        bound.info(
            "reply_delivered",
            platform_message_id=result.platform_message_id,
            attempts=delivery.attempts,
        )

    async def _failed(
        self,
        delivery: DeliveryRecord,
        transport: Transport,
        exc: DeliveryError,
        bound: structlog.stdlib.BoundLogger,
    ) -> None:
        reason = str(exc) or type(exc).__name__
        if exc.permanent:
            await self._store.mark_failed(delivery.id, reason)
            self._metrics.deliveries.labels(delivery.platform, "failed").inc()
            bound.warning("delivery_failed", error=reason, permanent=True)
            return
        if exc.retry_after is not None:
            delay = float(exc.retry_after)
        else:
            delay = backoff(delivery.attempts, self._settings.max_backoff)
        if exc.ambiguous and not self._resend_safe_after(transport, delay):
            # the platform may already show it; resending could double-post
            await self._store.mark_failed(delivery.id, f"ambiguous: {reason}")
            self._metrics.deliveries.labels(delivery.platform, "failed").inc()
            bound.warning("delivery_ambiguous", error=reason)
            return
        if delivery.attempts >= self._settings.max_attempts:
            await self._store.mark_failed(
                delivery.id, f"gave up after {delivery.attempts} attempts: {reason}"
            )
            self._metrics.deliveries.labels(delivery.platform, "failed").inc()
            bound.warning("delivery_failed", error=reason, attempts=delivery.attempts)
            return
        if exc.retry_after is not None:
            self._metrics.retry_after_seconds.labels(delivery.platform).inc(delay)
        await self._store.mark_retry(delivery.id, delay=delay, error=reason)
        self._metrics.deliveries.labels(delivery.platform, "retry").inc()
        bound.info("delivery_retry_scheduled", error=reason, delay_s=round(delay, 2))
