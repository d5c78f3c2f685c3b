"""``[prices]`` and ``[budgets]`` of the config file (``GATEWAY_CONFIG_FILE``).

Prices are per million tokens. A budget is in cost (priced models) or in tokens (any model);
an unset one is no limit. A place's own limit (``[budgets.places."PATTERN"]``) replaces
``place_per_month`` where the pattern matches, the most specific pattern winning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gateway.core.config_file import ConfigFile
from gateway.core.domain import unescape_part

MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class Price:
    input: Decimal
    output: Decimal


@dataclass(frozen=True, slots=True)
class PriceSet:
    prices: Mapping[str, Price] = field(default_factory=dict)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> Decimal | None:
        """The call's cost, or None when the model has no price."""
        price = self.prices.get(model)
        if price is None:
            return None
        return (prompt_tokens * price.input + completion_tokens * price.output) / MILLION

    def as_json(self) -> dict[str, dict[str, str]]:
        return {
            m: {"input": str(p.input), "output": str(p.output)}
            for m, p in sorted(self.prices.items())
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """One limit: in cost, in tokens, or both."""

    cost: Decimal | None = None
    tokens: int | None = None

    @property
    def is_set(self) -> bool:
        return self.cost is not None or self.tokens is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlaceLimit:
    pattern: str
    limit: Limit

    def matches(self, place: str) -> bool:
        return place_matches(self.pattern, place)

    @property
    def specificity(self) -> tuple[int, int]:
        parts = self.pattern.split(":")
        return (len([p for p in parts if p != "*"]), len(parts))


@dataclass(frozen=True, slots=True, kw_only=True)
class Budgets:
    person_per_day: Limit = Limit()
    place_per_month: Limit = Limit()
    total_per_month: Limit = Limit()
    places: tuple[PlaceLimit, ...] = ()

    @property
    def any(self) -> bool:
        return (
            self.person_per_day.is_set
            or self.place_per_month.is_set
            or self.total_per_month.is_set
            or any(p.limit.is_set for p in self.places)
        )

    def for_place(self, place: str) -> tuple[str, Limit]:
        """The place's limit and its name: its own entry, else ``place_per_month``."""
        found = [p for p in self.places if p.matches(place)]
        if found:
            best = max(found, key=lambda p: p.specificity)
            return f'places."{best.pattern}"', best.limit
        return "place_per_month", self.place_per_month


def place_matches(pattern: str, place: str) -> bool:
    """``slack:*:C0SUPPORT`` matches the place ``slack:T1:C0SUPPORT``; ``*`` matches any.
    Both are written as session keys write them (a ``:`` in a chat id as ``%3A``); parts are
    compared decoded, so ``%3a`` and ``%3A`` are one."""
    if pattern == "*":
        return True
    want = pattern.split(":")
    # a place is ``SessionKey.chat_text``: its chat holds no bare ':', its scope may
    platform, _, rest = place.partition(":")
    scope, _, chat = rest.rpartition(":")
    have = [platform, scope, chat] if scope else place.split(":")
    if len(want) > len(have):
        return False
    return all(
        w == "*" or w == h or unescape_part(w) == unescape_part(h)
        for w, h in zip(want, have, strict=False)
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageConfig:
    prices: PriceSet = PriceSet()
    budgets: Budgets = Budgets()


def usage_config(file: ConfigFile) -> UsageConfig:
    """Parse ``[prices]`` and ``[budgets]``; a bad entry is a ``ConfigError`` naming it."""
    return UsageConfig(prices=_prices(file.section("prices")), budgets=_budgets(file))


def _number(entry: str, value: Any) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigFile.error(entry, "must be a number")
    if value < 0:
        raise ConfigFile.error(entry, "must not be negative")
    return Decimal(str(value))


def _tokens(entry: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigFile.error(entry, "must be a whole number of tokens, 0 or more")
    return value


def _prices(section: Mapping[str, Any]) -> PriceSet:
    prices: dict[str, Price] = {}
    for model, table in section.items():
        entry = f'[prices."{model}"]'
        if not isinstance(table, Mapping):
            raise ConfigFile.error(entry, "must be a table with input and output")
        unknown = sorted(set(table) - {"input", "output"})
        if unknown:
            raise ConfigFile.error(f"{entry}.{unknown[0]}", "unknown key; known: input, output")
        for key in ("input", "output"):
            if key not in table:
                raise ConfigFile.error(f"{entry}.{key}", "is missing (per million tokens)")
        prices[model] = Price(
            input=_number(f"{entry}.input", table["input"]),
            output=_number(f"{entry}.output", table["output"]),
        )
    return PriceSet(prices)


_KEYS = {
    "person_per_day": ("person_per_day", "cost"),
    "person_tokens_per_day": ("person_per_day", "tokens"),
    "place_per_month": ("place_per_month", "cost"),
    "place_tokens_per_month": ("place_per_month", "tokens"),
    "total_per_month": ("total_per_month", "cost"),
    "total_tokens_per_month": ("total_per_month", "tokens"),
}


def _budgets(file: ConfigFile) -> Budgets:
    section = file.section("budgets")
    values: dict[str, dict[str, Any]] = {name: {} for name, _ in _KEYS.values()}
    for key, value in section.items():
        if key == "places":
            continue
        if key not in _KEYS:
            known = ", ".join([*_KEYS, "places"])
            raise ConfigFile.error(f"[budgets].{key}", f"unknown key; known: {known}")
        name, kind = _KEYS[key]
        entry = f"[budgets].{key}"
        values[name][kind] = _number(entry, value) if kind == "cost" else _tokens(entry, value)
    places = section.get("places", {})
    if not isinstance(places, Mapping):
        raise ConfigFile.error("[budgets.places]", "must be a table of places")
    return Budgets(
        **{name: Limit(**kinds) for name, kinds in values.items()},
        places=tuple(_place_limit(pattern, table) for pattern, table in places.items()),
    )


def _place_limit(pattern: str, table: Any) -> PlaceLimit:
    entry = f'[budgets.places."{pattern}"]'
    if not isinstance(table, Mapping):
        raise ConfigFile.error(entry, "must be a table with per_month or tokens_per_month")
    if pattern != "*" and len(pattern.split(":")) < 3:
        raise ConfigFile.error(entry, "a place is platform:scope:chat[:thread] or *")
    unknown = sorted(set(table) - {"per_month", "tokens_per_month"})
    if unknown:
        raise ConfigFile.error(
            f"{entry}.{unknown[0]}", "unknown key; known: per_month, tokens_per_month"
        )
    cost = table.get("per_month")
    tokens = table.get("tokens_per_month")
    return PlaceLimit(
        pattern=pattern,
        limit=Limit(
            cost=None if cost is None else _number(f"{entry}.per_month", cost),
            tokens=None if tokens is None else _tokens(f"{entry}.tokens_per_month", tokens),
        ),
    )
