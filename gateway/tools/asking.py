"""Routing that asks: when keyword routing is not confident, one short side query asks the
model which tool families (catalog domains) a message needs.

It uses the cheapest of the models the place may use, is charged to the place in the usage
ledger, and has a time limit; a failure or a late answer is ``None`` and the caller offers
the read-only bundle. It runs only when tools are configured and confidence is low, so the
hot path of a confident (or tool-less) turn does not change.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from gateway.agents.base import QuickAsker

log = structlog.get_logger(__name__)

#: (place, model, (prompt tokens, completion tokens)): the usage ledger's charge
Charge = Callable[[str, str, tuple[int, int]], Awaitable[None]]
NONE = "none"
_WORD = re.compile(r"[\w.-]+", re.UNICODE)


def family_prompt(families: Mapping[str, Sequence[str]]) -> str:
    """The side query's instructions: each family with the words it is known by."""
    lines = [
        "You route a chat message to tool families. Answer with the names of the families",
        "the message needs, comma-separated, or none. Answer with names only.",
        "Families:",
    ]
    for name, words in sorted(families.items()):
        shown = ", ".join(words[:8])
        lines.append(f"- {name}" + (f": {shown}" if shown else ""))
    return "\n".join(lines)


def parse_families(answer: str, families: Sequence[str]) -> tuple[str, ...]:
    """The known family names in the model's answer, in the catalog's order."""
    said = {w.lower() for w in _WORD.findall(answer)}
    return tuple(f for f in families if f.lower() in said)


@dataclass(kw_only=True)
class FamilyAsker:
    agent: QuickAsker
    #: ask when keyword confidence is below this (0: never)
    below: float
    timeout: float
    #: the cheapest of the models a place may use
    cheapest: Callable[[Sequence[str]], str]
    charge: Charge | None = None
    max_output_tokens: int = 24

    def wanted(self, confidence: float) -> bool:
        return confidence < self.below

    async def ask(
        self,
        text: str,
        families: Mapping[str, Sequence[str]],
        *,
        models: Sequence[str],
        place: str,
    ) -> tuple[str, ...] | None:
        """The families the model names for ``text``; ``None`` if it failed or was late."""
        if not families or not text.strip() or not models:
            return None
        model = self.cheapest(models)
        try:
            result = await asyncio.wait_for(
                self.agent.ask_once(
                    model,
                    family_prompt(families),
                    text[:2000],
                    max_output_tokens=self.max_output_tokens,
                    timeout=self.timeout,
                ),
                self.timeout,
            )
        except TimeoutError:
            log.warning("tool_routing_ask_late", model=model, seconds=self.timeout)
            return None
        except Exception as exc:  # noqa: BLE001 - any failure of the side query falls back
            log.warning("tool_routing_ask_failed", model=model, error=repr(exc))
            return None
        if self.charge is not None:
            used = (result.prompt_tokens or 0, result.completion_tokens or 0)
            await self.charge(place, result.model or model, used)
        return parse_families(result.text, list(families))
