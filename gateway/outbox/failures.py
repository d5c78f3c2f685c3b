"""What a failed send leaves on its outbox row: failed for good (permanent, ambiguous where a
resend could double-post, or out of attempts), or retried after a backoff that honors the
platform's retry-after, the pace keys its limit names held closed meanwhile."""

from __future__ import annotations

import random
from dataclasses import dataclass

import structlog

from gateway.core import tracing
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError, StoreError
from gateway.core.lifecycle.supervisor import persist
from gateway.core.metrics import Metrics
from gateway.core.ports import Transport
from gateway.outbox.pacing import Budget, pace_rules
from session_store.records import DeliveryRecord
from session_store.store import Store

log = structlog.get_logger(__name__)


def backoff(attempt: int, cap: float) -> float:
    """Exponential backoff with full jitter: 1, 2, 4, ... seconds, capped."""
    base: float = min(cap, 2.0 ** max(attempt - 1, 0))
    return float(base / 2 + random.random() * base / 2)


def resend_safe_after(transport: Transport, seconds: float) -> bool:
    """Can a send be repeated ``seconds`` after it may have reached the platform without
    posting twice? Only with an idempotency key the platform remembers that long
    (``resend_window``: Mattermost keeps a pending_post_id for 30 s; None = forever)."""
    if not transport.idempotent:
        return False
    window = transport.resend_window
    return window is None or seconds < window


async def hold_keys(
    budget: Budget, transport: Transport, target: ReplyTarget, keys: tuple[str, ...], seconds: float
) -> None:
    """Close the pace keys a platform's limit names (``DeliveryError.hold``) for ``seconds``."""
    own = {f"{transport.platform}:{key}" for key in keys}
    rules = [rule for rule in pace_rules(transport, target) if rule.key in own]
    if rules:
        await budget.hold(rules, seconds)


@dataclass(frozen=True, slots=True)
class Failures:
    """Records a failed send on its row (the delivery worker's part for failures)."""

    store: Store
    metrics: Metrics
    budget: Budget
    max_attempts: int
    max_backoff: float

    async def record(
        self,
        delivery: DeliveryRecord,
        transport: Transport,
        exc: DeliveryError,
        bound: structlog.stdlib.BoundLogger,
    ) -> None:
        reason = str(exc) or type(exc).__name__
        tracing.annotate(
            {
                "gateway.outcome": "failed",
                "gateway.error": reason,
                "gateway.permanent": exc.permanent,
                "gateway.ambiguous": exc.ambiguous,
            }
        )
        if exc.permanent:
            await self._give_up(delivery, reason)
            bound.warning("delivery_failed", error=reason, permanent=True)
            return
        if exc.retry_after is not None:
            delay = float(exc.retry_after)
        else:
            delay = backoff(delivery.attempts, self.max_backoff)
        if exc.ambiguous and not resend_safe_after(transport, delay):
            # the platform may already show it; resending could double-post
            await self._give_up(delivery, f"ambiguous: {reason}", ambiguous=True)
            bound.warning("delivery_ambiguous", error=reason)
            return
        if delivery.attempts >= self.max_attempts:
            await self._give_up(delivery, f"gave up after {delivery.attempts} attempts: {reason}")
            bound.warning("delivery_failed", error=reason, attempts=delivery.attempts)
            return
        if exc.retry_after is not None:
            self.metrics.retry_after_seconds.labels(delivery.platform).inc(delay)
            if exc.hold:
                await self._hold(transport, delivery.target, exc.hold, delay)
        await persist(
            lambda: self.store.outbox.mark_retry(delivery, delay=delay, error=reason),
            what="mark_retry",
            delivery_id=delivery.id,
        )
        self.metrics.deliveries.labels(delivery.platform, "retry").inc()
        bound.info("delivery_retry_scheduled", error=reason, delay_s=round(delay, 2))

    async def _give_up(
        self, delivery: DeliveryRecord, reason: str, *, ambiguous: bool = False
    ) -> None:
        """Mark the row failed for good (persisted through a store outage) and count it."""
        await persist(
            lambda: self.store.outbox.mark_failed(delivery, reason, ambiguous=ambiguous),
            what="mark_failed",
            delivery_id=delivery.id,
        )
        self.metrics.deliveries.labels(delivery.platform, "failed").inc()

    async def _hold(
        self, transport: Transport, target: ReplyTarget, keys: tuple[str, ...], seconds: float
    ) -> None:
        try:
            await hold_keys(self.budget, transport, target, keys, seconds)
        except StoreError as exc:  # the retry itself is still scheduled with its delay
            log.warning("pacing_hold_failed", error=str(exc))
