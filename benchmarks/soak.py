"""The soak: ``python -m benchmarks --only soak --minutes N [--bound MB_PER_MIN]``.

One real ``gateway run`` (``AGENT=openai`` against the fake model server, streaming) takes
steady mixed traffic on every surface of the fault campaign (``campaigns.platforms.DRIVERS``:
Telegram topics with streamed previews, Slack, Mattermost, the web chat, Matrix): plain
questions, tool calls (the clock, the knowledge base, a file in it uploaded at the start), tool
calls that ask for approval (decided in the web chat, left to expire elsewhere), documents and
voice notes shared in web chat threads (read, indexed and transcribed), ``/new``, and threads
that grow long enough for rolling summaries. Every 10 s it samples the process: RSS, open file
descriptors, the Python heap (``PYTHONTRACEMALLOC=1``), asyncio tasks, the database
connections, and the turn latency (p50/p99 over the interval, from ``gateway_turn_seconds``).
It reports the slope of each over the last two thirds of the run, the heap's top growth between
the first third and the end (tracemalloc snapshots), and fails on sustained growth: a slope
over its bound that is also seen as a higher mean in the last third than in the middle third.

The long form runs 60 minutes; ``.ci/run`` runs ``--minutes 2`` with a generous bound.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from campaigns.faults import REPO, start_replica
from campaigns.platforms import WEB_CHANNEL, PlatformSurfaces
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.pg import Postgres

SAMPLE_SECONDS = 10.0
_BUCKET = re.compile(r'^gateway_turn_seconds_bucket\{.*le="([^"]+)".*\} ([0-9.e+]+)$')
_GAUGE = re.compile(r"^(gateway_asyncio_tasks|gateway_python_heap_bytes) ([0-9.e+]+)$")

#: the growth each measure may show per minute over the last two thirds before it fails
BOUNDS = {"rss_mb": 2.0, "heap_mb": 1.0, "fds": 1.0, "db_conns": 0.5, "tasks": 2.0}
#: the tool a scripted turn calls that asks the thread for approval first (soak's tools file)
APPROVED_TOOL = "search_thread"
TOOLS_FILE = f"""
[tools.{APPROVED_TOOL}]
confirm = true
timeout_seconds = 20
"""
#: one document, then one voice note, shared in a web chat thread every this many seconds
#: (SOAK_SHARE_SECONDS)
SHARE_SECONDS = float(os.environ.get("SOAK_SHARE_SECONDS", "30"))


@dataclass
class Soak:
    minutes: float
    #: multiplies every bound (``.ci/run``'s short form is generous)
    slack: float = 1.0
    rate: float = 1.0  # messages per second (a shared 2-core machine keeps up with this)
    seed: int = 1
    samples: list[dict[str, float]] = field(default_factory=list)
    logdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-soak-")))
    #: what the traffic did besides messages: approvals decided, files shared
    counts: dict[str, int] = field(
        default_factory=lambda: {
            "approved": 0,
            "denied": 0,
            "documents": 0,
            "voice_notes": 0,
            "transcribed": 0,
        }
    )

    async def run(self) -> dict[str, Any]:
        pg = await asyncio.to_thread(Postgres, "gw_soak")
        fake = await FakeOpenAI(chunk_delay=0.02, chunk_chars=12).start()
        surface = PlatformSurfaces(rng=random.Random(self.seed + 1), threads_per_platform=12)
        try:
            await pg.create()
            await surface.start()
            return await self._run(pg, fake, surface)
        finally:
            await surface.stop()
            await fake.stop()
            await asyncio.to_thread(pg.cleanup)

    async def _run(
        self, pg: Postgres, fake: FakeOpenAI, surface: PlatformSurfaces
    ) -> dict[str, Any]:
        rng = random.Random(self.seed)
        env = self._env(pg.dsn, fake.base_url, surface.env)
        # a busy machine (tracemalloc on) may take minutes to start it
        replica = await start_replica(0, env, self.logdir, within=600)
        surface.attach(lambda: [replica.url])
        stop = asyncio.Event()
        try:
            await _upload_document(replica.url)
            feeder = asyncio.create_task(self._script(fake, rng, stop), name="soak-script")
            load = asyncio.create_task(self._load(surface, rng, stop), name="soak-load")
            web = asyncio.create_task(
                self._web_chat(replica.url, surface, rng, stop), name="soak-web"
            )
            await self._sample(replica.proc.pid, replica.url, pg.dsn)
            stop.set()
            await asyncio.gather(feeder, load, web, return_exceptions=True)
            # voice notes the gateway sent to the (fake) transcription server
            self.counts["transcribed"] = len(fake.transcriptions)
            return self.report()
        finally:
            replica.proc.terminate()
            try:
                await asyncio.wait_for(replica.proc.wait(), 20)
            except TimeoutError:
                replica.proc.kill()

    def _env(self, dsn: str, model_url: str, surfaces: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        tools = self.logdir / "tools.toml"
        tools.write_text(TOOLS_FILE)
        env.update(surfaces)
        env.update(
            {
                "PYTHONPATH": str(REPO),
                "PYTHONTRACEMALLOC": "1",
                "GATEWAY_TRACEMALLOC_DUMP": str(self.logdir),
                "DATABASE_URL": dsn,
                "GATEWAY_HTTP_PORT": "0",
                "GATEWAY_LOG_LEVEL": "warning",
                "AGENT": "openai",
                "OPENAI_BASE_URL": model_url,
                "OPENAI_API_KEY": "sk-soak",
                "AGENT_MODEL": "main",
                "AGENT_CONTEXT_WINDOWS": "main=2048",
                "AGENT_MAX_OUTPUT_TOKENS": "256",
                "GATEWAY_STREAM_EDIT_SECONDS": "0.5",
                "GATEWAY_TOOLS_FILE": str(tools),
                # the fake model server transcribes voice notes too
                "TRANSCRIPTION_BASE_URL": model_url,
            }
        )
        return env

    async def _script(self, fake: FakeOpenAI, rng: random.Random, stop: asyncio.Event) -> None:
        """Keep the model's script topped up with a mix: mostly answers, some tool calls."""
        while not stop.is_set():
            while len(fake.script) < 20:
                roll = rng.random()
                if roll < 0.05:
                    query = {"query": "question"}
                    fake.script.append(
                        Step(tool_calls=[{"name": APPROVED_TOOL, "arguments": query}])
                    )
                elif roll < 0.1:
                    fake.script.append(Step(tool_calls=[{"name": "current_time"}]))
                elif roll < 0.2:
                    query = {"query": "soak notes retention"}
                    fake.script.append(
                        Step(tool_calls=[{"name": "search_knowledge", "arguments": query}])
                    )
                else:
                    fake.script.append(Step(text="A steady answer. " * rng.randint(2, 30)))
            await asyncio.sleep(0.2)

    async def _load(
        self, surface: PlatformSurfaces, rng: random.Random, stop: asyncio.Event
    ) -> None:
        labels = surface.labels()
        offers: set[asyncio.Task[bool]] = set()
        n = 0
        while not stop.is_set():
            label = rng.choice(labels)
            n += 1
            text = (
                "/new"
                if rng.random() < 0.03
                else f"question {n} about " + "things " * rng.randint(1, 40)
            )
            task = asyncio.create_task(surface.offer(label, f"{label}-m{n}", text, duplicate=False))
            offers.add(task)
            task.add_done_callback(offers.discard)
            await asyncio.sleep(1 / self.rate)

    async def _web_chat(
        self, url: str, surface: PlatformSurfaces, rng: random.Random, stop: asyncio.Event
    ) -> None:
        """As the web chat's person: decide the approval cards shown in its threads (mostly
        approve), and share a document or a voice note in one of them now and then. Cards
        shown on the other platforms are left to expire."""
        decided: set[str] = set()
        shared_at = time.monotonic()
        n = 0
        async with httpx.AsyncClient(timeout=30) as client:
            while not stop.is_set():
                await asyncio.sleep(2)
                threads = surface.web_threads()
                try:
                    for root in threads:
                        base = f"{url}/web/api/channels/{WEB_CHANNEL}/threads/{root}"
                        response = await client.get(f"{base}/messages")
                        if response.status_code != 200:
                            continue
                        for m in response.json()["messages"]:
                            card = m.get("approval") or {}
                            if card.get("status") != "pending" or card["id"] in decided:
                                continue
                            decided.add(card["id"])
                            decision = "deny" if rng.random() < 0.2 else "approve"
                            await client.post(
                                f"{base}/approvals/{card['id']}", json={"decision": decision}
                            )
                            self.counts["approved" if decision == "approve" else "denied"] += 1
                    if threads and time.monotonic() - shared_at >= SHARE_SECONDS:
                        shared_at = time.monotonic()
                        n += 1
                        await self._share(client, url, rng.choice(threads), n)
                except (httpx.HTTPError, KeyError, ValueError) as exc:
                    print(f"soak: web chat step failed ({exc!r})", file=sys.stderr)

    async def _share(self, client: httpx.AsyncClient, url: str, root: str, n: int) -> None:
        files = f"{url}/web/api/channels/{WEB_CHANNEL}/threads/{root}/files"
        if n % 2:
            text = f"# Shared notes {n}\n\n" + f"Item {n} of the soak's shared notes. " * 60
            response = await client.post(
                files,
                params={"name": f"notes-{n}.md", "type": "text/markdown"},
                content=text.encode(),
                headers={"Content-Type": "application/octet-stream"},
            )
            kind = "documents"
        else:
            response = await client.post(
                files,
                params={"name": f"voice-{n}.ogg", "type": "audio/ogg"},
                content=b"OggS" + os.urandom(2048),
                headers={"Content-Type": "application/octet-stream"},
            )
            kind = "voice_notes"
        if response.status_code < 300:
            self.counts[kind] += 1
        else:
            print(
                f"soak: {kind} refused: {response.status_code} {response.text[:200]}",
                file=sys.stderr,
            )

    async def _sample(self, pid: int, url: str, dsn: str) -> None:
        end = time.monotonic() + self.minutes * 60
        snapped = False
        previous: dict[float, float] = {}
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as client:
            conn = await asyncpg.connect(dsn)
            try:
                while time.monotonic() < end:
                    await asyncio.sleep(SAMPLE_SECONDS)
                    try:
                        text = (await client.get(f"{url}/metrics")).text
                    except httpx.HTTPError as exc:  # a busy moment: the next sample reads it
                        print(f"soak: /metrics not read ({exc!r})", file=sys.stderr)
                        continue
                    buckets, gauges = _parse(text)
                    p50, p99 = _quantiles(buckets, previous)
                    previous = buckets
                    conns = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid()"
                    )
                    self.samples.append(
                        {
                            "t": time.monotonic() - started,
                            "rss_mb": _rss(pid) / 1e6,
                            "fds": float(len(os.listdir(f"/proc/{pid}/fd"))),
                            "db_conns": float(conns),
                            "tasks": gauges.get("gateway_asyncio_tasks", 0.0),
                            "heap_mb": gauges.get("gateway_python_heap_bytes", 0.0) / 1e6,
                            "turns": buckets.get(float("inf"), 0.0),
                            "p50_ms": p50 * 1000,
                            "p99_ms": p99 * 1000,
                        }
                    )
                    if not snapped:
                        # the heap early on (a snapshot costs RSS: before the slopes' window)
                        os.kill(pid, signal.SIGUSR2)
                        snapped = True
                os.kill(pid, signal.SIGUSR2)
                await _snapshots(self.logdir, 2, within=60)
            finally:
                await conn.close()

    def report(self) -> dict[str, Any]:
        tail = self.samples[len(self.samples) // 3 :]
        slopes = {k: _slope([s["t"] for s in tail], [s[k] for s in tail]) * 60 for k in BOUNDS}
        third = max(1, len(self.samples) // 3)
        middle, last = self.samples[third : 2 * third], self.samples[2 * third :]
        growing = {
            k: slopes[k] > BOUNDS[k] * self.slack
            and bool(middle and last)
            and _mean([s[k] for s in last]) > _mean([s[k] for s in middle])
            for k in BOUNDS
        }
        return {
            "minutes": self.minutes,
            "samples": self.samples,
            "slopes_per_minute": slopes,
            "bounds_per_minute": {k: v * self.slack for k, v in BOUNDS.items()},
            "sustained_growth": [k for k, bad in growing.items() if bad],
            "heap_top_growth": _top_growth(self.logdir),
            "traffic": dict(self.counts),
            "logs": str(self.logdir),
        }


async def _snapshots(directory: Path, count: int, *, within: float) -> None:
    """Until ``count`` heap snapshots are written whole (the process logs each)."""
    for _ in range(int(within)):
        if len(list(directory.glob("heap-*.snap"))) >= count:
            break
        await asyncio.sleep(1)
    await asyncio.sleep(3)  # the last one may still be being written


async def _upload_document(url: str) -> None:
    body = ("# Soak notes\n\n" + "Retention of soak notes is thirty days. " * 40).encode()
    async with httpx.AsyncClient(timeout=30) as client:
        await client.post(
            f"{url}/api/v1/kb/documents?name=soak-notes.md",
            content=body,
            headers={"Content-Type": "application/octet-stream"},
        )


def _parse(text: str) -> tuple[dict[float, float], dict[str, float]]:
    buckets: dict[float, float] = {}
    gauges: dict[str, float] = {}
    for line in text.splitlines():
        if m := _BUCKET.match(line):
            le = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
            buckets[le] = buckets.get(le, 0.0) + float(m.group(2))
        elif m := _GAUGE.match(line):
            gauges[m.group(1)] = float(m.group(2))
    return buckets, gauges


def _quantiles(now: dict[float, float], before: dict[float, float]) -> tuple[float, float]:
    """p50 and p99 of the turns finished between two scrapes (bucket upper bounds)."""
    delta = sorted((le, n - before.get(le, 0.0)) for le, n in now.items())
    total = delta[-1][1] if delta else 0.0
    if total <= 0:
        return 0.0, 0.0

    def q(p: float) -> float:
        # linear within the bucket the quantile falls in (Prometheus' histogram_quantile)
        lower, below = 0.0, 0.0
        for le, n in delta:
            if n >= p * total:
                if le == float("inf") or n == below:
                    return le
                return lower + (le - lower) * (p * total - below) / (n - below)
            lower, below = le, n
        return delta[-1][0]

    return q(0.5), q(0.99)


def _rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1]) * 1024
    return 0.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope (per second)."""
    if len(xs) < 2:
        return 0.0
    mx, my = _mean(xs), _mean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


def _top_growth(directory: Path, top: int = 8) -> list[str]:
    snaps = sorted(directory.glob("heap-*.snap"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    if len(snaps) < 2:
        return []
    first, last = (
        tracemalloc.Snapshot.load(str(snaps[0])),
        tracemalloc.Snapshot.load(str(snaps[-1])),
    )
    return [str(stat) for stat in last.compare_to(first, "lineno")[:top]]


def _ms(value: float) -> str:
    """A bucket's upper bound in ms; past the last bucket, ``>`` it."""
    return ">10000" if value == float("inf") else f"{value:.0f}"


def markdown(result: dict[str, Any]) -> str:
    samples = result["samples"]
    lines = [
        f"## Soak ({result['minutes']:.0f} min, one `gateway run`, every surface, sampled every "
        f"{SAMPLE_SECONDS:.0f} s)",
        "",
        "| t (s) | RSS (MB) | heap (MB) | fds | db conns | tasks | p50 (ms) | p99 (ms) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    step = max(1, len(samples) // 12)
    for s in [*samples[::step], *([samples[-1]] if samples and (len(samples) - 1) % step else [])]:
        lines.append(
            f"| {s['t']:.0f} | {s['rss_mb']:.1f} | {s['heap_mb']:.1f} | {s['fds']:.0f} | "
            f"{s['db_conns']:.0f} | {s['tasks']:.0f} | {_ms(s['p50_ms'])} | {_ms(s['p99_ms'])} |"
        )
    lines += [
        "",
        "| measure | slope per minute (last two thirds) | bound |",
        "| --- | ---: | ---: |",
    ]
    for k, v in result["slopes_per_minute"].items():
        lines.append(f"| {k} | {v:+.3f} | {result['bounds_per_minute'][k]:.2f} |")
    grew = result["sustained_growth"]
    traffic = result.get("traffic") or {}
    lines += [
        "",
        f"Sustained growth: {', '.join(grew) if grew else 'none'}.",
        "Besides the messages: "
        + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in traffic.items())
        + " (approvals decided in the web chat; documents and voice notes shared there).",
    ]
    if result["heap_top_growth"]:
        lines += ["", "Heap top growth (first third -> end):", ""]
        lines += [f"    {line}" for line in result["heap_top_growth"]]
    return "\n".join(lines)


def main(minutes: float, *, slack: float = 1.0) -> int:
    import json

    result = asyncio.run(Soak(minutes=minutes, slack=slack).run())
    print(markdown(result))
    print(json.dumps(result, indent=2, default=str), file=sys.stderr)
    return 1 if result["sustained_growth"] else 0
