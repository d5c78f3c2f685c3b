"""Per-turn routing: which small bundle of tools a message gets (§5).

The router is cheap and deterministic: it matches the message's words against the catalog's
domain names and aliases. Confident matches offer the matched domains' tools; a low-confidence
turn gets a read-only bundle (never all tools). The offered schemas are then sized against a
token budget and trimmed by priority, and the trim is logged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from gateway.tools.catalog import ToolCaller, ToolPolicy, ToolPolicyCatalog

log = structlog.get_logger(__name__)

Phase = Literal["explore", "lookup", "act"]
#: a turn whose best match scores below this gets the read-only bundle
CONFIDENT = 0.5
#: the read-only bundle's size
READ_ONLY_BUNDLE = 6
#: per-tool framing of a function definition in the prompt
TOOL_OVERHEAD = 8

_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingDecision:
    domains: tuple[str, ...]
    confidence: float
    phase: Phase
    #: the aliases/domain words that matched (why)
    matched: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "domains": list(self.domains),
            "confidence": round(self.confidence, 2),
            "phase": self.phase,
            "matched": list(self.matched),
        }


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _contains(words: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    if n == 0:
        return False
    return any(list(words[i : i + n]) == list(phrase) for i in range(len(words) - n + 1))


def _stem_match(words: Sequence[str], term: str) -> bool:
    # "sessions" matches "session", "searching" matches "search": a cheap plural/-ing fold
    stems = {term, term + "s", term + "es", term + "ing", term + "ed"}
    return any(w in stems for w in words)


def route(text: str, policies: Sequence[ToolPolicy]) -> RoutingDecision:
    """Score each domain by the strongest evidence in ``text``: an alias phrase (1.0), the
    domain's own name (0.8), one word of a multi-word alias (0.3). The phase is ``act`` when
    a matched alias belongs to a tool that changes something, ``lookup`` for confident reads,
    ``explore`` otherwise."""
    words = _words(text)
    scores: dict[str, float] = {}
    matched: list[str] = []
    acting = False
    for policy in policies:
        for alias in policy.aliases:
            phrase = _words(alias)
            score = 0.0
            if _contains(words, phrase) or (len(phrase) == 1 and _stem_match(words, phrase[0])):
                score = 1.0
            elif len(phrase) > 1 and any(len(p) > 3 and p in words for p in phrase):
                score = 0.3
            if score:
                if score >= CONFIDENT:
                    matched.append(alias)
                    if policy.operation != "read":
                        acting = True
                for d in policy.domains:
                    scores[d] = max(scores.get(d, 0.0), score)
        for d in policy.domains:
            if _stem_match(words, d.lower()):
                scores[d] = max(scores.get(d, 0.0), 0.8)
                if d not in matched:
                    matched.append(d)
    confidence = max(scores.values(), default=0.0)
    if confidence < CONFIDENT:
        return RoutingDecision(
            domains=tuple(sorted(scores)), confidence=confidence, phase="explore"
        )
    domains = tuple(sorted(d for d, s in scores.items() if s >= CONFIDENT))
    return RoutingDecision(
        domains=domains,
        confidence=confidence,
        phase="act" if acting else "lookup",
        matched=tuple(dict.fromkeys(matched)),
    )


def with_asked(
    decision: RoutingDecision, asked: Sequence[str], policies: Sequence[ToolPolicy]
) -> RoutingDecision:
    """The keyword decision with the families the model named; none named (or the query
    failed) is ``explore``: the read-only bundle."""
    if not asked:
        return RoutingDecision(
            domains=decision.domains, confidence=decision.confidence, phase="explore"
        )
    domains = tuple(sorted({*asked, *(decision.domains if decision.phase != "explore" else ())}))
    acting = any(p.operation != "read" and set(p.domains) & set(domains) for p in policies)
    return RoutingDecision(
        domains=domains,
        confidence=decision.confidence,
        phase="act" if acting and decision.phase == "act" else "lookup",
        matched=(*decision.matched, *(f"asked:{d}" for d in asked)),
    )


def allowed_policies(catalog: ToolPolicyCatalog, caller: ToolCaller) -> list[ToolPolicy]:
    return [p for n in catalog.available(caller) if (p := catalog.policy(n)) is not None]


def families_of(policies: Sequence[ToolPolicy]) -> dict[str, list[str]]:
    """Each domain with the aliases of its tools (what the side query shows the model)."""
    out: dict[str, list[str]] = {}
    for policy in policies:
        for domain in policy.domains:
            words = out.setdefault(domain, [])
            words.extend(a for a in policy.aliases if a not in words)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Bundle:
    decision: RoutingDecision
    #: offered tool names, in priority order
    names: tuple[str, ...]
    schemas: tuple[Mapping[str, Any], ...]
    schema_tokens: int
    trimmed: tuple[str, ...] = ()


def _rank(policy: ToolPolicy, decision: RoutingDecision) -> tuple[int, int, int, str]:
    in_domain = 0 if set(policy.domains) & set(decision.domains) else 1
    risk = {"low": 0, "medium": 1, "high": 2}[policy.risk]
    return (in_domain, -policy.priority, risk, policy.name)


def select_bundle(
    catalog: ToolPolicyCatalog,
    caller: ToolCaller,
    text: str,
    *,
    max_tokens: int,
    count: Callable[[str], int],
    asked: Sequence[str] | None = None,
) -> Bundle:
    """The tools to offer for this turn: allowed for ``caller``, routed by ``text``, sized
    to ``max_tokens`` of schema (``count`` measures text in tokens). ``asked`` are the
    families the model named in the side query (``gateway.tools.asking``): they join the
    keyword match; ``()`` (the query failed) offers the read-only bundle."""
    policies = allowed_policies(catalog, caller)
    decision = route(text, policies)
    if asked is not None:
        decision = with_asked(decision, asked, policies)
    if decision.phase == "explore":
        chosen = [p for p in policies if p.operation == "read"]
        chosen.sort(key=lambda p: _rank(p, decision))
        chosen = chosen[:READ_ONLY_BUNDLE]
    else:
        chosen = [p for p in policies if set(p.domains) & set(decision.domains)]
        chosen.sort(key=lambda p: _rank(p, decision))
    names: list[str] = []
    schemas: list[Mapping[str, Any]] = []
    trimmed: list[str] = []
    total = 0
    for policy in chosen:
        tool = catalog.tool(policy.name)
        if tool is None:
            continue
        schema = tool.spec.openai_schema()
        cost = TOOL_OVERHEAD + count(json.dumps(schema, ensure_ascii=False, separators=(",", ":")))
        if total + cost > max_tokens:
            trimmed.append(policy.name)
            continue
        names.append(policy.name)
        schemas.append(schema)
        total += cost
    if trimmed:
        log.warning(
            "tool_bundle_trimmed",
            kept=names,
            trimmed=trimmed,
            schema_tokens=total,
            max_schema_tokens=max_tokens,
        )
    return Bundle(
        decision=decision,
        names=tuple(names),
        schemas=tuple(schemas),
        schema_tokens=total,
        trimmed=tuple(trimmed),
    )
