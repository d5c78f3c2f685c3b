"""Tool routing's side query, wired: when keyword confidence is low, the cheapest of the
place's models (by the price list in force) is asked which tool families a message needs,
and the query is charged to the place."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.agents.base import Agent, QuickAsker
from gateway.core.settings import Settings
from gateway.tools.asking import FamilyAsker
from gateway.usage.service import UsageService


def routing_asker(settings: Settings, agent: Agent, usage: UsageService) -> FamilyAsker | None:
    """The asker, or None when the side query is off or the agent cannot answer one."""
    if settings.gateway_routing_ask_below <= 0 or not isinstance(agent, QuickAsker):
        return None

    def cheapest(models: Sequence[str]) -> str:
        prices = usage.config.prices

        def price(model: str) -> tuple[bool, float]:
            cost = prices.cost(model, 1000, 1000)
            return (cost is None, float(cost or 0))

        return min(models, key=price)

    return FamilyAsker(
        agent=agent,
        below=settings.gateway_routing_ask_below,
        timeout=settings.gateway_routing_ask_seconds,
        cheapest=cheapest,
        charge=usage.charge_place,
    )
