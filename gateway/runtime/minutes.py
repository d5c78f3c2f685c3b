"""Sessions' minutes, wired: which knowledge base a place's minutes go to (its profile's
``minutes_kb``, read from the profiles in force at the time), the cheapest of the place's
models for the closing summary (by the price list in force), and the charge to the place."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.agents.base import Agent
from gateway.core.domain import SessionKey
from gateway.core.settings import Settings
from gateway.turns.minutes import MinutesSettings, MinutesWorker
from session_store.repos.minutes import Minutes

if TYPE_CHECKING:
    from gateway.runtime.gateway import Gateway


def build_minutes(settings: Settings, gw: Gateway, agent: Agent) -> MinutesWorker:
    """The minutes worker of ``gw`` (its store, knowledge base, profiles, usage and metrics)."""
    profiles, usage = gw.profiles, gw.usage

    def kb_of(key: SessionKey) -> str | None:
        return profiles.resolve(key).profile.minutes_kb

    def model_of(key: SessionKey) -> str:
        profile = profiles.resolve(key).profile
        models = profile.models or settings.agent_models or [settings.agent_model]
        prices = usage.config.prices

        def price(model: str) -> tuple[bool, float]:
            cost = prices.cost(model, 1000, 1000)
            return (cost is None, float(cost or 0))

        return min(models, key=price)

    return MinutesWorker(
        gw.store,
        Minutes(gw.store.db),
        gw.knowledge,
        agent,
        kb_of=kb_of,
        model_of=model_of,
        enabled=lambda: any(p.minutes_kb for p in profiles.book.profiles.values()),
        settings=MinutesSettings(
            poll_seconds=max(settings.gateway_poll_seconds, 0.2),
            summary_tokens=settings.agent_summary_tokens,
            public_url=(settings.gateway_public_url or "").rstrip("/"),
        ),
        charge=usage.charge_summary,
        metrics=gw.metrics,
    )
