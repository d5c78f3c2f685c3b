"""The fault campaign's provider rows: what a person sees while the model provider struggles.

Two ``gateway run`` replicas on one PostgreSQL, ``AGENT=openai`` against the fake
OpenAI-compatible server (``testsupport.fakes.openai``) with ``AGENT_FALLBACK_MODELS=backup``,
and the sink platform recording every post and typing indicator. One phase per fault, each
offering one message a second, every message in a thread of its own:

- ``429 storm``: the chosen model answers 429 with ``Retry-After: 3``;
- ``5xx burst``: it answers 503;
- ``stalled``: it holds its answer past the client's timeout;
- ``broken``: it drops the connection mid-answer;
- ``slow first token``: its answers start 7 s late (under the timeout);
- ``all down``: the chosen model and the fallback both answer 503 for longer than the deadline.

Per phase: answers delivered, answers from the fallback, status lines, apologies (each must
name the cause) and the longest silence a person saw (from their message to the next thing
shown in their thread: typing, a status line or the answer).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from campaigns.faults import REPO, Replica, start_replica
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink_server import SinkServer
from testsupport.pg import Postgres

CHAT = "prov"


@dataclass(frozen=True)
class Phase:
    name: str
    #: model -> the fault every request for it gets during the phase
    faults: dict[str, Step]
    seconds: float = 12.0


PHASES = [
    Phase("baseline", {}, 6.0),
    Phase("429 storm", {"main": Step(status=429, retry_after=3)}),
    Phase("5xx burst", {"main": Step(status=503)}, 8.0),
    Phase("stalled", {"main": Step(stall=60)}, 10.0),
    Phase("broken", {"main": Step(break_after=0)}, 8.0),
    Phase("slow first token", {"main": Step(first_delay=7)}, 10.0),
    Phase("all down", {"main": Step(status=503), "backup": Step(status=503)}, 36.0),
]

SETTINGS = {
    "AGENT": "openai",
    "AGENT_MODEL": "main",
    "AGENT_FALLBACK_MODELS": "backup",
    "AGENT_TIMEOUT_SECONDS": "8",
    "AGENT_RETRY_DEADLINE_SECONDS": "30",
    "AGENT_STATUS_AFTER_SECONDS": "5",
    "AGENT_BREAKER_FAILURES": "5",
    "AGENT_BREAKER_SECONDS": "10",
    "GATEWAY_TOOLS": "false",
    "GATEWAY_WEB_CHAT": "false",
    "GATEWAY_POLL_SECONDS": "0.3",
    "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
    "SINK_IDEMPOTENT": "1",
    "SINK_TYPING": "1",
    "OPENAI_API_KEY": "sk-campaign",
}


@dataclass
class ProviderCampaign:
    replicas: int = 2
    rate: float = 1.0
    offered: dict[str, tuple[str, float]] = field(default_factory=dict)  # thread -> phase, at
    logdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-provider-")))

    async def run(self) -> dict[str, Any]:
        pg = await asyncio.to_thread(Postgres, "gw_provider")
        await pg.create()
        sink = await SinkServer(dedupe=True).start()
        fake = await FakeOpenAI(chunk_delay=0.0).start()
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update(SETTINGS)
        env.update(
            {
                "PYTHONPATH": str(REPO),
                "DATABASE_URL": pg.dsn,
                "GATEWAY_HTTP_PORT": "0",
                "OPENAI_BASE_URL": fake.base_url,
                "SINK_URL": sink.url,
            }
        )
        replicas: list[Replica] = []
        try:
            replicas = list(
                await asyncio.gather(
                    *(start_replica(i, env, self.logdir) for i in range(self.replicas))
                )
            )
            async with httpx.AsyncClient(timeout=10) as client:
                for phase in PHASES:
                    await self._phase(phase, fake, client, [r.url for r in replicas])
                fake.model_faults.clear()
                await self._drain(sink, deadline=60)
            stored = await _stored(pg.dsn)
            return self.report(sink, stored)
        finally:
            for r in replicas:
                if r.alive:
                    r.proc.terminate()
            for r in replicas:
                try:
                    await asyncio.wait_for(r.proc.wait(), 15)
                except TimeoutError:
                    r.proc.kill()
            await fake.stop()
            await sink.stop()
            await asyncio.to_thread(pg.cleanup)

    async def _phase(
        self, phase: Phase, fake: FakeOpenAI, client: httpx.AsyncClient, urls: list[str]
    ) -> None:
        fake.model_faults.clear()
        fake.model_faults.update(phase.faults)
        n = 0
        started = time.monotonic()
        while time.monotonic() - started < phase.seconds:
            thread = f"{phase.name.replace(' ', '_')}-{n}"
            body = {"chat": CHAT, "thread": thread, "id": thread, "text": f"question {thread}"}
            self.offered[thread] = (phase.name, time.monotonic())
            try:
                await client.post(f"{urls[n % len(urls)]}/sink/inbound", json=body)
            except httpx.HTTPError:
                self.offered.pop(thread)
            n += 1
            await asyncio.sleep(1 / self.rate)

    async def _drain(self, sink: SinkServer, *, deadline: float) -> None:
        """Until every offered thread has its answer or apology (or ``deadline`` s)."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            done = {p["target"]["thread_id"] for p in sink.posts.values() if _final(p["text"])}
            if set(self.offered) <= done:
                return
            await asyncio.sleep(0.5)

    def report(self, sink: SinkServer, stored: dict[str, str]) -> dict[str, Any]:
        rows: dict[str, dict[str, Any]] = {
            p.name: {
                "offered": 0,
                "answered": 0,
                "from_fallback": 0,
                "status_lines": 0,
                "apologies": 0,
                "apologies_naming_cause": 0,
                "unanswered": 0,
                "longest_silence": 0.0,
            }
            for p in PHASES
        }
        posts: dict[str, list[tuple[float, str]]] = {}
        for p in sink.posts.values():
            posts.setdefault(p["target"]["thread_id"], []).append((p["at"], p["text"]))
        typing: dict[str, list[float]] = {}
        for thread, at in sink.typing:
            typing.setdefault(thread or "", []).append(at)
        for thread, (phase, at) in self.offered.items():
            row = rows[phase]
            row["offered"] += 1
            seen = sorted(posts.get(thread, []))
            final = next((t for t in seen if _final(t[1])), None)
            row["status_lines"] += sum(1 for _, text in seen if not _final(text))
            if final is None:
                row["unanswered"] += 1
                continue
            if final[1].startswith("Sorry"):
                row["apologies"] += 1
                row["apologies_naming_cause"] += any(
                    c in final[1] for c in ("rate limited", "unavailable", "too long")
                )
            else:
                row["answered"] += 1
                row["from_fallback"] += stored.get(thread) == "backup"
            shown = sorted([at, *typing.get(thread, []), *(t for t, _ in seen)])
            shown = [t for t in shown if at <= t <= final[0]]
            gaps = [b - a for a, b in itertools.pairwise(shown)]
            row["longest_silence"] = max(row["longest_silence"], max(gaps, default=0.0))
        return {"phases": rows, "logs": str(self.logdir)}


def _final(text: str) -> bool:
    return text.startswith(("re: ", "Sorry"))


async def _stored(dsn: str) -> dict[str, str]:
    """thread -> the model stored with its answer."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT s.thread_id, m.model FROM messages m JOIN sessions s ON s.id = m.session_id"
            " WHERE m.role = 'assistant' AND s.chat_id = $1",
            CHAT,
        )
    finally:
        await conn.close()
    return {r["thread_id"]: r["model"] for r in rows}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "## Provider faults (2 replicas, AGENT_FALLBACK_MODELS=backup, deadline 30 s, "
        "status after 5 s)",
        "",
        "| fault | offered | answers delivered | from fallback | status lines | apologies "
        "(naming the cause) | unanswered | longest silence (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in result["phases"].items():
        lines.append(
            f"| {name} | {r['offered']} | {r['answered']} | {r['from_fallback']} | "
            f"{r['status_lines']} | {r['apologies']} ({r['apologies_naming_cause']}) | "
            f"{r['unanswered']} | {r['longest_silence']:.1f} |"
        )
    return "\n".join(lines)


def failed(result: dict[str, Any]) -> bool:
    """Every message answered or apologised for, every apology naming its cause."""
    rows = result["phases"].values()
    return any(r["unanswered"] or r["apologies"] != r["apologies_naming_cause"] for r in rows)


async def run_provider_campaign() -> dict[str, Any]:
    return await ProviderCampaign().run()
