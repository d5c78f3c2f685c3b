"""Tool routing on a labelled set: precision and recall of the tool families chosen for
``benchmarks/data/routing.jsonl`` (message, expected families), for keywords alone and for
keywords plus the side query that asks the model when keyword confidence is low.

The side query runs through the gateway's own ``FamilyAsker`` and routing code. Its model is
a scripted one (a local fake answering from the labels, with seeded noise: it misses a family
and names a wrong one now and then), and, when a model is configured the way the gateway
reads it (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``AGENT_MODEL``), that real model too.

A message's chosen families are the routed domains; the read-only bundle (``explore``) chooses
none. Counts are micro-averaged over the families: precision = right / chosen, recall =
right / expected. ``python -m benchmarks --only routing``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.agents.base import QuickAsker, SummaryResult
from gateway.tools.asking import FamilyAsker
from gateway.tools.builtin import DEFAULT_POLICIES
from gateway.tools.catalog import ToolPolicy, parse_entry
from gateway.tools.routing import families_of, route, with_asked

__all__ = [
    "POLICIES",
    "Labelled",
    "Score",
    "ScriptedModel",
    "families_of",
    "keywords_alone",
    "load",
    "main",
    "render",
    "run",
    "with_side_query",
]

DATA = Path(__file__).parent / "data" / "routing.jsonl"
#: the threshold the how-to suggests (GATEWAY_ROUTING_ASK_BELOW; the gateway's default 0 never asks)
ASK_BELOW = 0.5

#: the built-in tools plus two families a tools file typically adds
POLICIES: list[ToolPolicy] = [
    *DEFAULT_POLICIES.values(),
    parse_entry(
        "files.read_file",
        {
            "domains": ["files"],
            "operation": "read",
            "risk": "low",
            "aliases": ["open", "show file"],
        },
    ),
    parse_entry(
        "files.write_file",
        {
            "domains": ["files"],
            "operation": "write",
            "risk": "medium",
            "aliases": ["save", "write to"],
        },
    ),
    parse_entry(
        "jira.create_issue",
        {
            "domains": ["tickets"],
            "operation": "write",
            "risk": "medium",
            "aliases": ["ticket", "jira", "file a bug"],
        },
    ),
]


@dataclass(frozen=True)
class Labelled:
    message: str
    families: frozenset[str]


def load(path: Path = DATA) -> list[Labelled]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.append(Labelled(row["message"], frozenset(row["families"])))
    return out


@dataclass
class ScriptedModel(QuickAsker):
    """Answers the side query from the labels, with seeded noise."""

    labels: Mapping[str, frozenset[str]]
    families: Sequence[str]
    seed: int = 1
    miss: float = 0.15
    wrong: float = 0.10
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    async def ask_once(
        self, model: str, instructions: str, text: str, *, max_output_tokens: int, timeout: float
    ) -> SummaryResult:
        said = {f for f in self.labels.get(text, frozenset()) if self.rng.random() >= self.miss}
        if self.rng.random() < self.wrong:
            said.add(self.rng.choice(list(self.families)))
        answer = ", ".join(sorted(said)) or "none"
        return SummaryResult(text=answer, model=model, prompt_tokens=0, completion_tokens=0)


@dataclass
class Score:
    name: str
    right: int = 0
    chosen: int = 0
    expected: int = 0
    asked: int = 0
    failed: int = 0
    seconds: float = 0.0

    def add(self, chosen: frozenset[str], expected: frozenset[str]) -> None:
        self.right += len(chosen & expected)
        self.chosen += len(chosen)
        self.expected += len(expected)

    @property
    def precision(self) -> float:
        return self.right / self.chosen if self.chosen else 1.0

    @property
    def recall(self) -> float:
        return self.right / self.expected if self.expected else 1.0

    def row(self) -> dict[str, Any]:
        return {
            "mode": self.name,
            "precision": round(self.precision, 3),
            "recall": round(self.recall, 3),
            "asked": self.asked,
            "failed": self.failed,
            "seconds": round(self.seconds, 2),
        }


def _chosen(domains: Sequence[str], phase: str) -> frozenset[str]:
    return frozenset() if phase == "explore" else frozenset(domains)


def keywords_alone(rows: Sequence[Labelled]) -> Score:
    score = Score("keywords alone")
    for row in rows:
        decision = route(row.message, POLICIES)
        score.add(_chosen(decision.domains, decision.phase), row.families)
    return score


async def with_side_query(
    rows: Sequence[Labelled], agent: QuickAsker, *, name: str, model: str, timeout: float
) -> Score:
    score = Score(name)
    families = families_of(POLICIES)
    asker = FamilyAsker(
        agent=agent, below=ASK_BELOW, timeout=timeout, cheapest=lambda models: models[0]
    )
    started = time.perf_counter()
    for row in rows:
        decision = route(row.message, POLICIES)
        if asker.wanted(decision.confidence):
            score.asked += 1
            found = await asker.ask(row.message, families, models=(model,), place="bench")
            if found is None:
                score.failed += 1
            decision = with_asked(decision, found or (), POLICIES)
        score.add(_chosen(decision.domains, decision.phase), row.families)
    score.seconds = time.perf_counter() - started
    return score


async def run(seed: int = 1) -> list[dict[str, Any]]:
    rows = load()
    labels = {r.message: r.families for r in rows}
    families = sorted(families_of(POLICIES))
    scores = [keywords_alone(rows)]
    scripted = ScriptedModel(labels, families, seed=seed)
    scores.append(
        await with_side_query(
            rows, scripted, name="keywords + side query (scripted)", model="scripted", timeout=3
        )
    )
    if os.environ.get("OPENAI_BASE_URL"):
        from gateway.agents.openai import OpenAIAgent
        from gateway.core.settings import Settings

        settings = Settings()
        agent = OpenAIAgent.from_settings(settings)
        try:
            scores.append(
                await with_side_query(
                    rows,
                    agent,
                    name=f"keywords + side query ({settings.agent_model})",
                    model=settings.agent_model,
                    timeout=settings.gateway_routing_ask_seconds,
                )
            )
        finally:
            await agent.aclose()
    return [s.row() for s in scores]


def render(rows: Sequence[Mapping[str, Any]], messages: int) -> str:
    lines = [
        f"tool routing: {messages} labelled messages, families "
        f"{', '.join(sorted(families_of(POLICIES)))}; ask below confidence {ASK_BELOW}",
        f"{'mode':<44} {'precision':>9} {'recall':>7} {'asked':>6} {'failed':>7}",
    ]
    for r in rows:
        lines.append(
            f"{r['mode']:<44} {r['precision']:>9.3f} {r['recall']:>7.3f} "
            f"{r['asked'] or '-':>6} {r['failed'] if r['asked'] else '-':>7}"
        )
    if not os.environ.get("OPENAI_BASE_URL"):
        lines.append("(set OPENAI_BASE_URL, OPENAI_API_KEY and AGENT_MODEL to add a real model)")
    return "\n".join(lines)


def main(seed: int = 1) -> int:
    rows = asyncio.run(run(seed))
    print(render(rows, len(load())))
    return 0
