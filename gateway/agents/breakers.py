"""Per-model circuit breakers shared by the replicas, and the model metrics.

A model that fails ``AGENT_BREAKER_FAILURES`` requests in a row (counted in PostgreSQL, over
every replica) opens its breaker for ``AGENT_BREAKER_SECONDS``: meanwhile new turns go
straight to the next of ``AGENT_FALLBACK_MODELS``. When the time is up, one replica's request
probes the model (``session_store.repos.breakers.Breakers.claim_probe``); an answer closes the
breaker for everyone, a failure opens it again.

Each process reads a model's row at most once per ``refresh`` seconds (a turn asks before
every request), and writes a success only when the row it knows had failures. A database that
does not answer leaves every model available: the breaker spares a struggling provider, it is
never the reason a turn is not even tried.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import structlog

from gateway.agents.health import Guarded
from gateway.agents.retry import ProviderFailure
from gateway.core.errors import StoreError
from gateway.core.metrics import Metrics
from gateway.core.settings import Settings
from session_store.repos.breakers import BreakerRecord, Breakers

log = structlog.get_logger(__name__)

#: models remembered per process (a bound: the models are the configured ones in practice)
MAX_MODELS = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerSettings:
    failures: int = 5
    open_seconds: float = 30.0
    #: seconds a process trusts the row it read
    refresh: float = 1.0


class SharedBreakers:
    """``gateway.agents.health.ModelHealth`` over the ``model_breakers`` table."""

    def __init__(self, repo: Breakers, metrics: Metrics, settings: BreakerSettings) -> None:
        self.repo = repo
        self._metrics = metrics
        self._settings = settings
        self._known: OrderedDict[str, tuple[float, BreakerRecord | None]] = OrderedDict()

    async def _row(self, model: str) -> BreakerRecord | None:
        seen = self._known.get(model)
        if seen is not None and time.monotonic() - seen[0] < self._settings.refresh:
            return seen[1]
        row = await self.repo.breaker(model)
        self._remember(model, row)
        return row

    def _remember(self, model: str, row: BreakerRecord | None) -> None:
        self._known[model] = (time.monotonic(), row)
        self._known.move_to_end(model)
        while len(self._known) > MAX_MODELS:
            self._known.popitem(last=False)
        opened = row is not None and row.open_until is not None
        self._metrics.model_breaker_open.labels(model).set(1 if opened else 0)

    async def available(self, model: str) -> bool:
        try:
            row = await self._row(model)
            if row is None or row.open_until is None:
                return True
            if row.is_open:
                return False
            # its time is up: one request (on one replica) probes it
            probe = await self.repo.claim_probe(model, open_seconds=self._settings.open_seconds)
            self._remember(model, row)  # still open: the probe's answer closes it
            if probe:
                log.info("model_breaker_probe", model=model)
            return probe
        except StoreError as exc:
            log.warning("model_breaker_unreadable", model=model, error=str(exc))
            return True

    async def failed(self, model: str, failure: ProviderFailure) -> None:
        self._metrics.model_requests.labels(model, failure.cause).inc()
        if not failure.retryable:
            return  # a refused request says nothing about the provider's health
        try:
            row = await self.repo.record_failure(
                model,
                cause=failure.cause,
                error=str(failure),
                threshold=self._settings.failures,
                open_seconds=self._settings.open_seconds,
            )
        except StoreError as exc:
            log.warning("model_breaker_unwritable", model=model, error=str(exc))
            return
        if row.is_open and row.failures == self._settings.failures:
            log.warning("model_breaker_opened", model=model, cause=failure.cause)
        self._remember(model, row)

    async def succeeded(self, model: str) -> None:
        self._metrics.model_requests.labels(model, "ok").inc()
        seen = self._known.get(model)
        row = seen[1] if seen is not None else None
        if row is None or (row.failures == 0 and row.open_until is None):
            return
        try:
            if await self.repo.record_success(model):
                log.info("model_breaker_closed", model=model)
        except StoreError as exc:
            log.warning("model_breaker_unwritable", model=model, error=str(exc))
            return
        self._remember(model, None)

    def skipped(self, model: str) -> None:
        self._metrics.model_requests.labels(model, "breaker_open").inc()

    def waited(self, model: str, seconds: float) -> None:
        self._metrics.model_retry_seconds.observe(seconds)


def guard_agent(
    agent: object, repo: Breakers, metrics: Metrics, settings: Settings
) -> SharedBreakers | None:
    """Give an agent that consults model health (``Guarded``: the ``openai`` agent) the
    shared breakers; None for the others."""
    if not isinstance(agent, Guarded):
        return None
    breakers = SharedBreakers(
        repo,
        metrics,
        BreakerSettings(
            failures=settings.agent_breaker_failures,
            open_seconds=settings.agent_breaker_seconds,
        ),
    )
    agent.health = breakers
    return breakers
