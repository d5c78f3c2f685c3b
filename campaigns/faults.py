"""The fault campaign: ``python -m benchmarks --only faults [--minutes N] [--seed S]``.

Three ``gateway run`` replicas on one PostgreSQL (an embedded server of the campaign's own, so
it can be stopped), a sink platform with idempotency keys (``testsupport.fakes.sink``, served
by ``testsupport.fakes.sink_server`` deduping by key, as Mattermost's pending_post_id does), and a
seeded load across 200 threads. Faults on a seeded schedule:

- SIGKILL of a random replica, restarted at once;
- PostgreSQL stopped for 10 s, then started;
- 429 storms with Retry-After, 5xx bursts and timeouts on sends;
- duplicate deliveries of inbound messages (a platform's retry);
- poison payloads (NUL, lone surrogates).

The campaign's agent answers with the ids of the messages its turn handled, and flags any
context from another thread, so that at the end every accepted message can be checked: answered
exactly once, in its own thread, with context only from that thread. The report is a table of
offered, answered, lost, duplicated, misrouted, leaked, poison handled, and the worst time to
recover after each kind of fault (from the fault's end until every message accepted before it
was answered)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from adapters.telegram import markdown as telegram_markdown
from gateway.agents.base import Turn
from gateway.core.domain import Reply
from session_store.repos.liveness import LIVE_PROCESSES
from testsupport.fakes.sink_server import SinkServer
from testsupport.pg import Postgres

CHAT = "camp"
_READY = re.compile(r"gateway ready: web chat at (http://\S+)")
_ANSWER = re.compile(r"^ans (\S+): (\S*)( LEAK)?$")
REPO = Path(__file__).resolve().parents[1]


#: a campaign message id, ``LABEL-mN``; its label names its thread (``t5``, ``tg3``, ``wb7``)
#: turns and sends held by a process that holds no liveness lock (``session_store.repos.liveness``)
DEAD_HELD = f"""
SELECT (SELECT count(*) FROM sessions
        WHERE turn_process IS NOT NULL AND turn_lease_until > now()
          AND turn_process NOT IN ({LIVE_PROCESSES}))
     + (SELECT count(*) FROM deliveries
        WHERE status = 'sending' AND claim_process IS NOT NULL
          AND claim_process NOT IN ({LIVE_PROCESSES}))
"""
_MID = re.compile(r"\b([a-z]+\d+)-m\d+\b")


class CampaignAgent:
    """Answers ``ans LABEL: id,id`` for the messages its turn handled; ``LEAK`` if its
    context held a message of another thread."""

    name = "campaign"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        await asyncio.sleep(0.2)  # a turn is in flight long enough to be killed in
        found = [m for m in (_MID.search(n.content) for n in turn.new_messages) if m]
        ids = [m.group(0) for m in found]
        labels = sorted({m.group(1) for m in found})
        label = labels[0] if labels else (turn.key.thread_id or "")
        foreign = len(labels) > 1 or any(
            m.role == "user" and (x := _MID.search(m.content)) is not None and x.group(1) != label
            for m in turn.context
        )
        return [Reply(text=f"ans {label}: {','.join(ids)}" + (" LEAK" if foreign else ""))]


# --- what the platform received: the sink server (``testsupport.fakes.sink_server``) -------


def last_answered(posts: dict[str, dict[str, Any]], mids: set[str]) -> str:
    """The message among ``mids`` whose answer was posted last."""
    latest, which = 0.0, ""
    for post in posts.values():
        match = _ANSWER.match(post["text"])
        if match and post["at"] > latest:
            hit = mids.intersection(match.group(2).split(","))
            if hit:
                latest, which = post["at"], sorted(hit)[0]
    return which


def answered_in(posts: dict[str, dict[str, Any]]) -> dict[str, list[tuple[str, bool]]]:
    """message id -> [(thread posted in, leak flag)] over every post."""
    out: dict[str, list[tuple[str, bool]]] = defaultdict(list)
    for post in posts.values():
        match = _ANSWER.match(post["text"])
        if match is None:
            continue
        thread = post["target"]["thread_id"]
        for mid in filter(None, match.group(2).split(",")):
            out[mid].append((thread, bool(match.group(3)) or match.group(1) != thread))
    return out


#: the sink server's scripted answer for each kind of send fault
SEND_FAULTS: dict[str, tuple[tuple[Any, ...], int]] = {
    "send_429": (("429", 1), 20),
    "send_500": (("500",), 10),
    "send_timeout": (("timeout", 6), 2),
}


class SinkSurface:
    """The sink platform (``testsupport.fakes.sink``) behind the campaign: inbound over HTTP
    to any live replica, answers recorded by the sink server, deduped by idempotency key."""

    def __init__(self, rng: random.Random, threads: int) -> None:
        self.rng = rng
        self.threads = threads
        self.sink = SinkServer(dedupe=True)
        self.env: dict[str, str] = {}
        self._live: Callable[[], Sequence[str]] = lambda: []
        self._client = httpx.AsyncClient(timeout=10)

    async def start(self) -> None:
        await self.sink.start()
        self.env = {
            "GATEWAY_WEB_CHAT": "false",
            "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
            "SINK_URL": self.sink.url,
            "SINK_IDEMPOTENT": "1",
        }

    def attach(self, live_urls: Callable[[], Sequence[str]]) -> None:
        self._live = live_urls

    def labels(self) -> list[str]:
        return [f"t{n}" for n in range(self.threads)]

    async def offer(self, label: str, mid: str, text: str, *, duplicate: bool) -> bool:
        body = json.dumps({"chat": CHAT, "thread": label, "id": mid, "text": text})
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = list(self._live())
            if live:
                try:
                    response = await self._client.post(
                        f"{self.rng.choice(live)}/sink/inbound",
                        content=body.encode(),
                        headers={"Content-Type": "application/json"},
                    )
                    if response.status_code == 200:
                        return True
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.3)  # the platform retries
        return False

    def send_fault(self, kind: str) -> None:
        action, count = SEND_FAULTS[kind]
        self.sink.script.extend([action] * count)

    def send_faults_pending(self) -> bool:
        """Scripted answers (429, 500, timeouts) no send has met yet."""
        return bool(self.sink.script)

    def answered(self) -> dict[str, list[tuple[bool, bool]]]:
        """message id -> [(posted in another thread, leak flag)] per answer."""
        return {
            mid: [(thread != mid.split("-m")[0], leak) for thread, leak in where]
            for mid, where in answered_in(self.sink.posts).items()
        }

    def last_answered(self, mids: set[str]) -> str:
        return last_answered(self.sink.posts, mids)

    def leaked(self) -> int:
        return sum(1 for p in self.sink.posts.values() if p["text"].endswith(" LEAK"))

    @property
    def resends(self) -> int:
        return self.sink.resends

    async def stop(self) -> None:
        await self._client.aclose()
        await self.sink.stop()


# --- replicas -------------------------------------------------------------------------------


@dataclass
class Replica:
    index: int
    proc: asyncio.subprocess.Process
    url: str

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None


async def start_replica(
    index: int, env: dict[str, str], logdir: Path, *, within: float = 120.0
) -> Replica:
    with (logdir / f"replica{index}.log").open("ab") as log:  # the child keeps its copy
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gateway",
            "run",
            env=env,
            cwd=str(REPO),
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    assert proc.stdout is not None
    deadline = time.monotonic() + within
    try:
        while True:
            line = await asyncio.wait_for(
                proc.stdout.readline(), max(deadline - time.monotonic(), 1)
            )
            if not line:
                raise RuntimeError(f"replica {index} exited with {await proc.wait()}")
            match = _READY.search(line.decode())
            if match:
                return Replica(index, proc, match.group(1).rstrip("/"))
    except BaseException:
        if proc.returncode is None:
            proc.kill()  # never left running when it did not start in time
            await proc.wait()
        raise


# --- the campaign ---------------------------------------------------------------------------


@dataclass
class Campaign:
    seconds: float
    seed: int
    threads: int = 200
    rate: float = 8.0  # messages per second offered
    kill_every: float = 15.0
    db_restarts: int = 1
    db_down_seconds: float = 10.0
    #: share of database restarts followed, 0 to 1.5 s after the server's return, by a
    #: SIGKILL (recovery measured from the kill)
    kill_after_db_restart: float = 0.5
    replicas: int = 3
    log_level: str = "warning"
    #: drive the real platform fakes and the web chat (``campaigns.platforms``)
    #: instead of the sink platform
    platforms: bool = False
    logdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-campaign-")))
    #: results
    offered: dict[str, str] = field(default_factory=dict)  # message id -> thread
    accepted_at: dict[str, float] = field(default_factory=dict)
    poison: set[str] = field(default_factory=set)
    duplicates_offered: int = 0
    #: refused for good by the surface (a 4xx: the web chat refuses NUL), never accepted
    refused: set[str] = field(default_factory=set)
    offer_errors: list[str] = field(default_factory=list)
    recoveries: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    #: after each SIGKILL: seconds until no claim is held by a process without its lock
    takeovers: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    held_at_kill: dict[str, int] = field(default_factory=dict)
    #: message id -> why its answer's delivery failed (read from the outbox at the end)
    failed_visibly: dict[str, str] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    slowest: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    #: (UTC wall clock, fault kind) as each fault ended, to read beside the replicas' logs
    timeline: list[tuple[str, str]] = field(default_factory=list)

    async def run(self) -> dict[str, Any]:
        rng = random.Random(self.seed)
        pg = await asyncio.to_thread(Postgres)
        await pg.create()
        surface: Any
        if self.platforms:
            from campaigns.platforms import DRIVERS, PlatformSurfaces

            # the threads are shared among the surfaces: each has fewer as surfaces are added
            surface = PlatformSurfaces(
                rng=random.Random(self.seed + 1),
                threads_per_platform=max(self.threads // len(DRIVERS), 1),
            )
        else:
            surface = SinkSurface(random.Random(self.seed + 1), self.threads)
        await surface.start()
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update(
            {
                "PYTHONPATH": str(REPO),
                "DATABASE_URL": pg.dsn,
                "GATEWAY_HTTP_PORT": "0",
                "AGENT": "campaigns.faults:CampaignAgent",
                "GATEWAY_POLL_SECONDS": "0.3",
                "GATEWAY_LOG_LEVEL": self.log_level,
                **surface.env,
            }
        )
        replicas = list(
            await asyncio.gather(
                *(start_replica(i, env, self.logdir) for i in range(self.replicas))
            )
        )
        surface.attach(lambda: [r.url for r in replicas if r.alive])
        labels = surface.labels()
        pending_faults: list[tuple[str, float, set[str]]] = []
        started = time.monotonic()
        stop_load = asyncio.Event()

        def outstanding() -> set[str]:
            answered = surface.answered()
            return {
                m for m in self.accepted_at if m not in answered and m not in self.failed_visibly
            }

        async def watch_failures() -> None:
            # an answer whose delivery failed (visibly) ends its message's wait too
            while True:
                await asyncio.sleep(0.5)
                try:
                    self.failed_visibly = await _failed_deliveries(pg.dsn)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    continue  # the database is down (a fault)

        def fault_ended(kind: str) -> None:
            self.timeline.append((time.strftime("%H:%M:%S") + f"{time.time() % 1:.3f}"[1:], kind))
            self.faults[kind] += 1
            pending_faults.append((kind, time.monotonic(), outstanding()))

        async def monitor() -> None:
            while True:
                await asyncio.sleep(0.05)
                if not pending_faults:
                    continue
                answered = surface.answered()
                now = time.monotonic()
                for item in list(pending_faults):
                    kind, ended, waiting = item
                    if all(m in answered or m in self.failed_visibly for m in waiting):
                        self.recoveries[kind].append(now - ended)
                        pending_faults.remove(item)
                        if waiting:
                            self.slowest.setdefault(kind, []).append(
                                (round(now - ended, 2), surface.last_answered(waiting))
                            )

        async def offer(label: str, mid: str, text: str, *, duplicate: bool = False) -> None:
            try:
                accepted = await surface.offer(label, mid, text, duplicate=duplicate)
            except Exception as exc:  # noqa: BLE001 - a fake's failure is reported, not fatal
                self.offer_errors.append(f"{mid}: {type(exc).__name__}: {exc}"[:200])
                return
            if accepted and not duplicate:
                self.accepted_at.setdefault(mid, time.monotonic())
            elif not accepted and not duplicate:
                self.refused.add(mid)

        counters: dict[str, int] = defaultdict(int)
        tasks: set[asyncio.Task[None]] = set()

        def offer_new(label: str, *, poison_rate: float = 0.03) -> asyncio.Task[None]:
            counters[label] += 1
            mid = f"{label}-m{counters[label]}"
            text = f"{label} {mid} hello"
            if rng.random() < poison_rate:
                text = f"{label} {mid} poison\u0000 \ud800 end"
                self.poison.add(mid)
            self.offered[mid] = label
            task = asyncio.create_task(offer(label, mid, text))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if rng.random() < 0.05:  # the platform delivers it twice
                self.duplicates_offered += 1
                dup = asyncio.create_task(offer(label, mid, text, duplicate=True))
                tasks.add(dup)
                dup.add_done_callback(tasks.discard)
            return task

        async def load() -> None:
            while not stop_load.is_set():
                offer_new(rng.choice(labels))
                await asyncio.sleep(rng.expovariate(self.rate))
            if tasks:
                await asyncio.gather(*tasks)

        async def measure_takeover(kind: str, killed_at: float) -> None:
            """Seconds until no turn or send is held by a process without its liveness
            lock: the dead replica's work taken over (or a live one re-locked)."""
            deadline = killed_at + 60
            while time.monotonic() < deadline:
                try:
                    conn = await asyncpg.connect(pg.dsn, timeout=5)
                    try:
                        while time.monotonic() < deadline:
                            held = int(await conn.fetchval(DEAD_HELD))
                            if not held:
                                break
                            self.held_at_kill[kind] = max(self.held_at_kill.get(kind, 0), held)
                            await asyncio.sleep(0.02)
                    finally:
                        await conn.close()
                    self.takeovers[kind].append(time.monotonic() - killed_at)
                    return
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                    await asyncio.sleep(0.05)

        async def kill_and_restart(kind: str = "sigkill") -> None:
            victim = rng.choice([r for r in replicas if r.alive])
            victim.proc.send_signal(signal.SIGKILL)
            await victim.proc.wait()
            fault_ended(kind)
            task = asyncio.create_task(measure_takeover(kind, time.monotonic()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            replicas[victim.index] = await start_replica(victim.index, env, self.logdir)

        async def database_restart() -> None:
            await pg.stop()
            await asyncio.sleep(self.db_down_seconds)
            await pg.start()
            fault_ended("db_restart")
            if rng.random() < self.kill_after_db_restart:
                # the hardest takeover: every liveness lock went with the server, and the
                # victim may die before or just after it re-locked
                await asyncio.sleep(rng.uniform(0.0, 1.5))
                await kill_and_restart("sigkill_after_db_restart")

        async def send_faults(kind: str) -> None:
            # a storm ends when its last scripted answer was met by a send (at most 20 s):
            # measured from its injection, the recovery was often over before the storm had
            # hit anything, and its 429s then landed on the next fault's messages
            surface.send_fault(kind)
            for _ in range(200):
                if not surface.send_faults_pending():
                    break
                await asyncio.sleep(0.05)
            fault_ended(kind)

        #: the connection drops the surfaces can make, and when each was last made
        last_drop = dict.fromkeys(surface.drop_kinds() if self.platforms else [], -30.0)

        def next_drop() -> str | None:
            # a websocket client resets its reconnect backoff only after 30 s up: drops of one
            # connection closer than that would measure the backoff, not us
            due = [k for k, at in last_drop.items() if time.monotonic() - at >= 30]
            return min(due, key=last_drop.__getitem__) if due else None

        async def connection_drop(kind: str) -> None:
            # posts made while the connection is down: only reconciliation (or a resume)
            # finds them
            last_drop[kind] = time.monotonic()
            await surface.drop_connection(kind, lambda label: offer_new(label, poison_rate=0))
            fault_ended(kind)

        async def schedule() -> None:
            db_at = sorted(rng.uniform(0.2, 0.7) * self.seconds for _ in range(self.db_restarts))
            next_kill = self.kill_every
            next_other = 5.0
            while not stop_load.is_set():
                elapsed = time.monotonic() - started
                if db_at and elapsed >= db_at[0]:
                    db_at.pop(0)
                    await database_restart()
                elif elapsed >= next_kill:
                    next_kill += self.kill_every * rng.uniform(0.7, 1.3)
                    await kill_and_restart()
                elif elapsed >= next_other:
                    next_other += rng.uniform(4, 8)
                    if self.platforms:
                        drop = next_drop()
                        if drop is not None:
                            await connection_drop(drop)
                        else:
                            await send_faults(rng.choice(surface.send_fault_kinds()))
                    else:
                        await send_faults(rng.choice(list(SEND_FAULTS)))
                else:
                    await asyncio.sleep(0.1)
                    continue
                # one fault at a time: the next waits until this one's recovery was measured
                # (at most 20 s), so each recovery time belongs to its own fault
                for _ in range(200):
                    if not pending_faults:
                        break
                    await asyncio.sleep(0.1)
            # a database restart still due when the load ends (the fault before it ran long:
            # a replica's restart on a busy machine takes seconds) is made before the drain,
            # while answers are still outstanding: every campaign has the restarts it planned
            while db_at:
                db_at.pop(0)
                await database_restart()

        watcher = asyncio.create_task(monitor())
        failures = asyncio.create_task(watch_failures())
        loader = asyncio.create_task(load())
        scheduler = asyncio.create_task(schedule())
        try:
            await asyncio.sleep(self.seconds)
            stop_load.set()
            await scheduler
            await loader
            # drain: everything accepted answered, or give up after a while
            drain_deadline = time.monotonic() + 90
            for _ in range(450):
                if not outstanding() or time.monotonic() > drain_deadline:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(3)  # a late duplicate post would show up by now
            self.failed_visibly = await _failed_deliveries(pg.dsn)
            result = self.report(surface)
        finally:
            watcher.cancel()
            failures.cancel()
            for r in replicas:
                if r.alive:
                    r.proc.send_signal(signal.SIGTERM)
            for r in replicas:
                try:
                    await asyncio.wait_for(r.proc.wait(), 30)
                except TimeoutError:
                    r.proc.kill()
            await surface.stop()
            await asyncio.to_thread(pg.cleanup)
        return result

    def report(self, surface: Any) -> dict[str, Any]:
        answered = surface.answered()
        accepted = set(self.accepted_at)
        # accepted, unanswered, but its answer is a failed delivery in /ops and the admin API
        # (invariant 6: sent, or a visible failed state), e.g. ambiguous after a SIGKILL
        failed = {m for m in accepted if m not in answered and m in self.failed_visibly}
        lost = sorted(m for m in accepted if m not in answered and m not in failed)
        duplicated = sorted(m for m, where in answered.items() if len(where) > 1)
        misrouted = sorted(m for m, where in answered.items() if any(w for w, _ in where))
        by_platform: dict[str, dict[str, int]] = {}
        if self.platforms:
            threads: dict[str, set[str]] = defaultdict(set)
            for mid, label in self.offered.items():
                name = surface.platform_of(mid)
                threads[name].add(label)
                row = by_platform.setdefault(
                    name,
                    {
                        "offered": 0,
                        "accepted": 0,
                        "answered": 0,
                        "failed_visibly": 0,
                        "lost": 0,
                        "duplicated": 0,
                        "misrouted": 0,
                    },
                )
                row["offered"] += 1
                if mid in accepted:
                    row["accepted"] += 1
                    row["answered"] += mid in answered
                    row["lost"] += mid in lost
                    row["failed_visibly"] += mid in failed
                row["duplicated"] += len(answered.get(mid, ())) > 1
                row["misrouted"] += any(w for w, _ in answered.get(mid, ()))
            for name, row in by_platform.items():
                row["threads"] = len(threads[name])
        return {
            "surfaces": "platforms" if self.platforms else "sink",
            "seconds": self.seconds,
            "seed": self.seed,
            "threads": self.threads,
            "replicas": self.replicas,
            "offered": len(self.offered),
            "accepted": len(accepted),
            "answered": sum(1 for m in accepted if m in answered),
            "lost": len(lost),
            "failed_visibly": len(failed),
            "failed_visibly_reasons": sorted({self.failed_visibly[m] for m in failed})[:5],
            "duplicated": len(duplicated),
            "misrouted": len(misrouted),
            "leaked": surface.leaked(),
            "refused": len(self.refused),
            "by_platform": by_platform,
            "poison_offered": len(self.poison),
            "poison_answered": sum(1 for m in self.poison if m in answered),
            "poison_refused": len(self.poison & self.refused),
            "duplicates_offered": self.duplicates_offered,
            "platform_deduped_resends": surface.resends,
            "offer_errors": self.offer_errors[:10],
            "faults": dict(self.faults),
            "worst_recovery_seconds": {k: max(v) for k, v in self.recoveries.items()},
            "median_recovery_seconds": {
                k: sorted(v)[len(v) // 2] for k, v in self.recoveries.items()
            },
            "unrecovered_faults": {
                k: n - len(self.recoveries.get(k, [])) for k, n in self.faults.items()
            },
            "takeover_seconds": {
                k: {"median": sorted(v)[len(v) // 2], "worst": max(v), "n": len(v)}
                for k, v in self.takeovers.items()
            },
            "slowest": self.slowest,
            "timeline": self.timeline,
            "examples": {
                "lost": lost[:5],
                "duplicated": duplicated[:5],
                "misrouted": misrouted[:5],
            },
            "logs": str(self.logdir),
        }


async def _failed_deliveries(dsn: str) -> dict[str, str]:
    """message id -> the failure of the delivery that carried its answer."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT platform, content, ambiguous, last_error FROM deliveries"
            " WHERE status = 'failed'"
        )
    finally:
        await conn.close()
    out: dict[str, str] = {}
    for row in rows:
        content = row["content"] or ""
        if row["platform"] == "telegram":
            # Telegram's outbox rows hold the rendered payload (text plus entities)
            content = telegram_markdown.decode(content)[0]
        match = _ANSWER.match(content)
        reason = ("ambiguous: " if row["ambiguous"] else "") + (row["last_error"] or "")[:80]
        for mid in filter(None, match.group(2).split(",")) if match else ():
            out[mid] = reason
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"## Fault campaign on the {result['surfaces']} ({result['seconds']:.0f} s, seed "
        f"{result['seed']}, {result['replicas']} replicas, {result['threads']} threads)",
        "",
        "| offered | answered | lost | duplicated | misrouted | leaked | poison handled |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {result['offered']} | {result['answered']} | {result['lost']} | "
        f"{result['duplicated']} | {result['misrouted']} | {result['leaked']} | "
        f"{result['poison_answered']}/{result['poison_offered']} |",
        "",
        "| fault | injected | median recovery (s) | worst recovery (s) | takeover median / "
        "worst (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for kind, n in sorted(result["faults"].items()):
        median = result["median_recovery_seconds"].get(kind)
        worst = result["worst_recovery_seconds"].get(kind)
        shown = ["-" if x is None else f"{x:.2f}" for x in (median, worst)]
        took = result.get("takeover_seconds", {}).get(kind)
        takeover = "" if took is None else f"{took['median']:.2f} / {took['worst']:.2f}"
        lines.append(f"| {kind} | {n} | {shown[0]} | {shown[1]} | {takeover} |")
    if result.get("by_platform"):
        lines += [
            "",
            "| surface | threads | offered | accepted | answered | failed visibly | lost | "
            "duplicated | misrouted |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, row in sorted(result["by_platform"].items()):
            lines.append(
                f"| {name} | {row.get('threads', '')} | {row['offered']} | {row['accepted']} | "
                f"{row['answered']} | {row.get('failed_visibly', 0)} | {row['lost']} | "
                f"{row['duplicated']} | {row.get('misrouted', 0)} |"
            )
    lines.append("")
    if result.get("failed_visibly"):
        reasons = "; ".join(result["failed_visibly_reasons"])
        lines.append(
            f"Accepted but answered only by a visibly failed delivery (in /ops and the admin "
            f"API, not lost): {result['failed_visibly']} ({reasons})."
        )
    if result.get("refused"):
        lines.append(
            f"Refused for good at ingress (never accepted, so not answered): {result['refused']}, "
            f"of which poison: {result['poison_refused']}."
        )
    lines.append(
        f"Inbound duplicates offered: {result['duplicates_offered']}; sends repeated under the "
        f"same idempotency key (deduped by the platform): {result['platform_deduped_resends']}."
    )
    return "\n".join(lines)


async def run_campaign(minutes: float, seed: int, **overrides: Any) -> dict[str, Any]:
    seconds = minutes * 60
    defaults: dict[str, Any] = {}
    if minutes >= 10:
        defaults = {"kill_every": seconds / 24, "db_restarts": 3}
    return await Campaign(seconds=seconds, seed=seed, **{**defaults, **overrides}).run()


def main(minutes: float, seed: int, *, platforms: bool = False, provider: bool = True) -> int:
    result = asyncio.run(run_campaign(minutes, seed, platforms=platforms))
    print(markdown(result))
    print(json.dumps(result, indent=2, default=str), file=sys.stderr)
    bad = result["lost"] + result["duplicated"] + result["misrouted"] + result["leaked"]
    if provider:
        # the model provider's faults: a gateway of its own with the openai agent
        from campaigns import provider as provider_faults

        rows = asyncio.run(provider_faults.run_provider_campaign())
        print()
        print(provider_faults.markdown(rows))
        print(json.dumps(rows, indent=2, default=str), file=sys.stderr)
        bad += provider_faults.failed(rows)
    return 1 if bad else 0
