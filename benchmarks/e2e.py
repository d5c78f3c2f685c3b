"""Section 4, end to end: a real ``gateway run`` process with the echo agent, driven over HTTP
the way platforms drive it, its replies caught where they land.

Surfaces: the built-in web chat (POST a message; the reply arrives on the thread's live
stream, SSE), the sink surface of the test suite (``testsupport/fakes/sink.py``: inbound over
HTTP, each reply POSTed to a recording server run here), and the platform fakes of the test
suite where they work (``testsupport/fakes``: Telegram's Bot API polled by the real adapter,
Slack's signed Events API and Web API, Mattermost's websocket and REST API, Discord's gateway
and REST API, Teams' signed Bot Framework activities) and a real Matrix homeserver (Synapse,
``testsupport/matrix.py``), rotated over many threads. Latency is from just before
the inbound request is sent (or the fake's update is queued) to the moment the reply reaches
its destination: gateway-added latency plus two local network hops (an upper bound).

Phases:
1. latency at fixed offered rates (open loop, ``rates`` msgs/s: one the gateway can keep up
   with here and the target's), p50/p99;
2. sustained throughput: ``concurrency`` conversations each waiting for its answer, every
   message in a new thread (a new session), until ``sessions`` sessions were served, with the
   gateway process's RSS sampled along the way (it must not grow with sessions served).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from benchmarks.common import db_cost, db_snapshot, pct
from benchmarks.maintenance import Maintenance
from testsupport.process import enter_side_by_side

REPO = Path(__file__).resolve().parents[1]
_READY = re.compile(r"gateway ready: web chat at (http://\S+)")
_TOKEN = re.compile(r"zq(\d+)qz")  # letters and digits only: no markup escapes it
WEB_THREADS = 100


@dataclass
class Waiters:
    """Send times of messages in flight, keyed by the token their reply echoes back."""

    sent: dict[int, tuple[float, str]] = field(default_factory=dict)
    events: dict[int, asyncio.Event] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    by_surface: dict[str, list[float]] = field(default_factory=dict)
    stray: int = 0
    #: sink messages in new threads, by thread: (wall clock sent, wall clock arrived,
    #: latency) once answered; matched against the gateway's log (``tail_breakdown``)
    sink_threads: dict[str, list[float]] = field(default_factory=dict)
    _thread_of: dict[int, str] = field(default_factory=dict)

    def expect(self, token: int, surface: str, thread: str | None = None) -> asyncio.Event:
        self.sent[token] = (time.perf_counter(), surface)
        if thread is not None:
            self._thread_of[token] = thread
            self.sink_threads[thread] = [time.time()]
        event = self.events[token] = asyncio.Event()
        return event

    def clear(self) -> None:
        self.latencies.clear()
        self.by_surface.clear()
        self.sink_threads.clear()

    def arrived(self, text: str) -> None:
        now = time.perf_counter()
        match = _TOKEN.search(text)
        token = int(match.group(1)) if match else -1
        found = self.sent.pop(token, None)
        if found is None:
            self.stray += 1
            return
        started, surface = found
        thread = self._thread_of.pop(token, None)
        if thread is not None and thread in self.sink_threads:
            self.sink_threads[thread] += [time.time(), now - started]
        self.latencies.append(now - started)
        self.by_surface.setdefault(surface, []).append(now - started)
        self.events.pop(token).set()


class Receiver:
    """The sink surface's platform side: records each reply the gateway sends."""

    def __init__(self, waiters: Waiters) -> None:
        self.waiters = waiters
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/send", self._send)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/send"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _send(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.waiters.arrived(body["text"])
        return web.json_response({"id": next(self._ids)})


class _Recorded(list[Any]):
    """A fake's list of what the bot sent, calling back on each append."""

    def __init__(self, on_append: Any) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, item: Any) -> None:
        super().append(item)
        self._on_append(item)


class _RecordedPosts(dict[str, Any]):
    def __init__(self, bot_id: str, on_post: Any) -> None:
        super().__init__()
        self._bot_id = bot_id
        self._on_post = on_post

    def __setitem__(self, key: str, post: Any) -> None:
        new = key not in self
        super().__setitem__(key, post)
        if new and post.get("user_id") == self._bot_id:
            self._on_post(post)


class _RecordedMessages(dict[str, Any]):
    """A fake's messages by id (Discord's, Teams'), calling back on each new one."""

    def __init__(self, on_new: Any) -> None:
        super().__init__()
        self._on_new = on_new

    def __setitem__(self, key: str, message: Any) -> None:
        new = key not in self
        super().__setitem__(key, message)
        if new:
            self._on_new(message)


class _MatrixRoom:
    """Matrix on the test suite's real Synapse homeserver (``testsupport/matrix.py``; no fake
    exists): a person's room with the bot, each question mentioning it at the top level (the
    answer roots a thread there), the bot's messages read from the person's ``/sync``."""

    def __init__(self, waiters: Waiters) -> None:
        from testsupport.matrix import Person, synapse

        self.waiters = waiters
        self.server = synapse()  # started once per process (a few seconds)
        self.bot = self.server.register("bench-bot")
        self.person = Person(self.server, self.server.register("bench-ann"))
        self.room = ""
        self.env = {
            "MATRIX_HOMESERVER_URL": self.server.url,
            "MATRIX_ACCESS_TOKEN": self.bot.access_token,
            "MATRIX_MESSAGES_PER_SECOND": "100",  # no limits on the test homeserver
        }
        self._joined = False
        self._sync: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.room = await self.person.create_room(invite=(self.bot.user_id,))
        since = (await self.person.call("GET", "/sync", timeout="0"))["next_batch"]
        self._sync = asyncio.create_task(self._read(since), name="bench-matrix-sync")

    async def _read(self, since: str) -> None:
        """The bot's new messages (an edit, ``m.replace``, is not a new one), as they land."""
        while True:
            got = await self.person.call("GET", "/sync", since=since, timeout="1000")
            since = got["next_batch"]
            joined = got.get("rooms", {}).get("join", {})
            for event in joined.get(self.room, {}).get("timeline", {}).get("events", []):
                content = event.get("content", {})
                relation = (content.get("m.relates_to") or {}).get("rel_type")
                mine = event.get("sender") == self.bot.user_id
                if mine and event.get("type") == "m.room.message" and relation != "m.replace":
                    self.waiters.arrived(str(content.get("body", "")))

    async def send(self, text: str) -> None:
        if not self._joined:
            # the bot joins the invite on its first sync; what is said before is not its
            for _ in range(200):
                if self.bot.user_id in await self.person.joined(self.room):
                    break
                await asyncio.sleep(0.1)
            self._joined = True
        await self.person.say(self.room, text, mention=self.bot.user_id)

    async def stop(self) -> None:
        if self._sync is not None:
            self._sync.cancel()
            with suppress(asyncio.CancelledError):
                await self._sync


class _Unavailable(Exception):
    """A platform this machine cannot run (the reason is its text): skipped, not failed."""


class PlatformFakes:
    """The test suite's platform fakes (``testsupport/fakes``: real local servers speaking each
    platform's API: Telegram, Slack, Mattermost, Discord, Teams) and its real Matrix homeserver,
    driven from here as their users, with replies timed where they land. A fake that is
    missing or does not work is skipped, with the reason (Matrix: Synapse is not installed)."""

    #: replies per second a platform's pacing lets through to one server (Mattermost: the
    #: adapter keeps the whole server under its default 10 req/s limit; Matrix: one room, two
    #: messages a second; Teams: 20 calls a second per tenant; Discord: about 40 a second per
    #: bot, each answer a thread start and a message). Offering more would measure the pacer's
    #: queue, not the gateway.
    MAX_RATE = {"mattermost": 4.0, "matrix": 2.0, "teams": 8.0, "discord": 12.0}

    def __init__(self, waiters: Waiters, only: frozenset[str] | None = None) -> None:
        self.waiters = waiters
        #: the fakes to start (``--surfaces``); None: all of them
        self.only = only
        self._last_send: dict[str, float] = {}
        self.skipped: dict[str, str] = {}
        self.env: dict[str, str] = {}
        self._fakes: dict[str, Any] = {}

    async def start(self) -> None:
        # a fake's server logs every connection the gateway drops at shutdown
        logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
        starts = {
            "telegram": self._telegram,
            "mattermost": self._mattermost,
            "slack": self._slack,
            "discord": self._discord,
            "teams": self._teams,
            "matrix": self._matrix,
        }
        for name, start in starts.items():
            if self.only is not None and name not in self.only:
                self.skipped[name] = "not in --surfaces"
                continue
            try:
                fake, env = await start()
            except _Unavailable as why:
                self.skipped[name] = str(why)
                continue
            except Exception as exc:  # noqa: BLE001 - a broken fake skips its platform only
                self.skipped[name] = f"{type(exc).__name__}: {exc}"
                continue
            self._fakes[name] = fake
            self.env |= env

    async def _telegram(self) -> tuple[Any, dict[str, str]]:
        from testsupport.fakes.telegram import FakeTelegram

        telegram = FakeTelegram()
        await telegram.start()
        telegram.sent = _Recorded(lambda sent: self.waiters.arrived(sent.text))
        return telegram, {
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE_URL": telegram.base_url,
        }

    async def _mattermost(self) -> tuple[Any, dict[str, str]]:
        from testsupport.fakes.mattermost import FakeMattermost

        mattermost = FakeMattermost()
        await mattermost.start()
        mattermost.posts = _RecordedPosts(
            mattermost.bot.id, lambda post: self.waiters.arrived(post["message"])
        )
        return mattermost, {
            "MATTERMOST_URL": mattermost.url,
            "MATTERMOST_TOKEN": str(mattermost.bot.token),
        }

    async def _slack(self) -> tuple[Any, dict[str, str]]:
        from testsupport.fakes import slack as slack_fake

        slack = slack_fake.FakeSlack()
        await slack.start()
        return slack, {
            "SLACK_BOT_TOKEN": slack_fake.BOT_TOKEN,
            "SLACK_SIGNING_SECRET": slack_fake.SIGNING_SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
        }

    async def _discord(self) -> tuple[Any, dict[str, str]]:
        from testsupport.discord import discord_env
        from testsupport.fakes.discord import FakeDiscord

        discord = FakeDiscord()
        await discord.start()
        bot = discord.bot.id
        discord.messages = _RecordedMessages(
            lambda m: self.waiters.arrived(m["content"]) if m["author"]["id"] == bot else None
        )
        return discord, discord_env(discord)

    async def _teams(self) -> tuple[Any, dict[str, str]]:
        from testsupport.fakes.teams import FakeTeams

        teams = FakeTeams()
        await teams.start()
        teams.messages = _RecordedMessages(
            lambda m: self.waiters.arrived(m.text) if m.by_bot else None
        )
        return teams, teams.env()

    async def _matrix(self) -> tuple[Any, dict[str, str]]:
        from testsupport.matrix import synapse_installed

        if not synapse_installed():
            raise _Unavailable("no Synapse: .venv-synapse is missing (.ci/run makes it)")
        # Synapse starts in a few seconds, blocking: in a thread, beside the loop
        matrix = await asyncio.to_thread(_MatrixRoom, self.waiters)
        await matrix.start()
        return matrix, matrix.env

    def connect(self, gateway_url: str) -> None:
        """Fakes that push to the gateway (Slack's Events API, Teams' Bot Framework
        activities) learn where it listens."""
        if "slack" in self._fakes:
            self._fakes["slack"].events_url = f"{gateway_url}/slack/events"
        if "teams" in self._fakes:
            self._fakes["teams"].messages_url = f"{gateway_url}/teams/messages"

    @property
    def platforms(self) -> list[str]:
        return sorted(self._fakes)

    def drop(self, platform: str, reason: str) -> None:
        self._fakes.pop(platform, None)
        self.skipped[platform] = reason

    def available(self, platform: str) -> bool:
        """May ``platform`` take one more message now without queueing behind its pacing?"""
        limit = self.MAX_RATE.get(platform)
        if limit is None:
            return True
        return time.perf_counter() - self._last_send.get(platform, 0.0) >= 1 / limit

    async def send(self, platform: str, n: int, text: str) -> None:
        """A user starts a new thread (a new session) with ``text``, mentioning the bot."""
        fake = self._fakes[platform]
        self._last_send[platform] = time.perf_counter()
        if platform == "telegram":
            # a forum of its own: Telegram paces sends per chat (about 1/s, 20/min in groups)
            forum = fake.forum()
            topic = fake.create_topic(forum, f"topic {n}")
            fake.user_says(forum, f"@{fake.bot.username} {text}", topic=topic)
        elif platform == "slack":
            # a channel of its own: Slack paces chat.postMessage at about 1/s per channel
            channel = fake.add_channel(f"C{n}")
            bot = fake.bot_user_id
            channel.messages = _Recorded(
                lambda m: self.waiters.arrived(m.text) if m.user == bot else None
            )
            await fake.user_posts(channel.id, f"<@{bot}> {text}")
        elif platform == "discord":
            # said before the bot's gateway session is up, a message is before its time
            for _ in range(200):
                if fake.live:
                    break
                await asyncio.sleep(0.1)
            # the bot answers in the thread it starts on the message: a channel of its own
            await fake.user_posts(fake.general, text, mention_bot=True)
        elif platform == "teams":
            # a channel of its own (Teams paces each conversation at about 2/s); the post
            # mentions the bot and roots the reply chain the answer goes to
            channel = fake.add_place(f"19:bench{n}@thread.tacv2", f"bench {n}", "channel")
            await fake.user_posts(channel, text)
        elif platform == "matrix":
            await fake.send(text)
        else:
            await fake.user_posts(fake.town_square, text, mention_bot=True)

    async def stop(self) -> None:
        for fake in self._fakes.values():
            with suppress(Exception):
                await fake.stop()


@asynccontextmanager
async def gateway_process(
    dsn: str,
    sink_url: str,
    log_path: Path,
    extra_env: dict[str, str],
    *,
    repo: Path = REPO,
    wrapper: Sequence[str] = (),
    ready_within: float = 60.0,
) -> AsyncIterator[Any]:
    """``python -m gateway run`` with the sink surface and the echo agent, from ``repo``'s
    code (another checkout measures a baseline in the same run). ``wrapper``: a command the
    gateway runs under (``valgrind --tool=callgrind``, ``benchmarks.instructions``), given
    ``ready_within`` seconds to start."""
    # GATEWAY_CONFIG_FILE passes through: profiles and places measured against a baseline
    kept = ("PATH", "HOME", "LANG", "TMPDIR", "GATEWAY_CONFIG_FILE")
    env = {k: v for k, v in os.environ.items() if k in kept}
    env.update(
        {
            "PYTHONPATH": str(repo),
            "DATABASE_URL": dsn,
            "GATEWAY_HTTP_PORT": "0",
            "GATEWAY_ADAPTERS": "testsupport.fakes.sink:create",
            "SINK_URL": sink_url,
            "AGENT": "echo",
            "GATEWAY_LOG_FORMAT": "json",
            "GATEWAY_LOG_LEVEL": "info",
            **extra_env,
        }
    )
    log_file = log_path.open("ab")
    proc = await asyncio.create_subprocess_exec(
        *wrapper,
        sys.executable,
        "-m",
        "gateway",
        "run",
        env=env,
        cwd=str(repo),
        stdout=asyncio.subprocess.PIPE,
        stderr=log_file,
    )
    assert proc.stdout is not None
    try:
        url = None
        deadline = time.monotonic() + ready_within
        while url is None:
            line = await asyncio.wait_for(proc.stdout.readline(), deadline - time.monotonic())
            if not line:
                raise RuntimeError(f"gateway exited:\n{log_path.read_text()[-3000:]}")
            match = _READY.search(line.decode())
            if match:
                url = match.group(1).rstrip("/")
        yield proc, url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log_file.close()


@asynccontextmanager
async def sink_only(
    dsn: str,
    repo: Path,
    *,
    first_token: int,
    prefix: str,
    wrapper: Sequence[str] = (),
    ready_within: float = 60.0,
) -> AsyncIterator[tuple[Any, Driver, Path]]:
    """``repo``'s gateway with the sink surface alone, its receiver, and a driver that opens
    new threads named with ``prefix`` (from event id ``first_token``, for a database earlier
    drivers used): (process, driver, a scratch directory that holds its log and goes with
    it). For the benchmarks that compare checkouts on the core path (``sink_pair``,
    ``instructions``)."""
    waiters = Waiters()
    receiver = Receiver(waiters)
    await receiver.start()
    work = Path(tempfile.mkdtemp(prefix="gw-sink-"))
    try:
        async with (
            gateway_process(
                dsn,
                receiver.url,
                work / "gateway.log",
                {},
                repo=repo,
                wrapper=wrapper,
                ready_within=ready_within,
            ) as (proc, url),
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as http,
        ):
            driver = Driver(url, http, waiters, PlatformFakes(waiters))
            driver.sink_urls = [url]
            driver.reuse_from(first_token, prefix=prefix)
            yield proc, driver, work
    finally:
        await receiver.stop()
        shutil.rmtree(work, ignore_errors=True)


# where the gateway's CPU goes: a sample counts for the leaf-most frame that matches
_CATEGORIES = (
    ("logging, JSON encoding", ("structlog/", "logging/__init__", "gateway/logs.py", "json/")),
    ("database driver (asyncpg)", ("asyncpg/",)),
    ("outbound HTTP client (httpx)", ("httpx/", "httpcore/", "anyio/")),
    ("inbound HTTP server (uvicorn, starlette, fastapi)", ("uvicorn/", "starlette/", "fastapi/")),
    ("context assembly (gateway/context.py)", ("gateway/context.py",)),
    ("turn scheduler (gateway/turns/)", ("gateway/turns/", "gateway/agents.py")),
    ("delivery worker (gateway/delivery.py)", ("gateway/delivery.py",)),
    ("store (session_store/)", ("session_store/",)),
    (
        "platform SDKs (python-telegram-bot, websockets, aiohttp)",
        ("(telegram/", "(websockets/", "(aiohttp/", "(mattermostautodriver/"),
    ),
    ("intake and adapters", ("gateway/intake.py", "adapters/", "testsupport/fakes/sink")),
)


async def py_spy(pid: int, seconds: float, out: Path) -> asyncio.subprocess.Process | None:
    """Start sampling ``pid`` with py-spy (on-CPU samples only), if it is installed."""
    exe = shutil.which("py-spy")
    if exe is None:
        return None
    return await asyncio.create_subprocess_exec(
        exe,
        "record",
        "-p",
        str(pid),
        "-d",
        str(max(1, int(seconds))),
        "-r",
        "200",
        "-f",
        "raw",
        "-o",
        str(out),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


def profile_breakdown(raw: Path) -> dict[str, float]:
    """Share of on-CPU samples per part of the gateway (py-spy's raw format)."""
    counts: dict[str, int] = {}
    total = 0
    if not raw.exists():
        return {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        category = "event loop, other"
        for frame in reversed(stack.split(";")):
            found = next((c for c, marks in _CATEGORIES if any(m in frame for m in marks)), None)
            if found:
                category = found
                break
        counts[category] = counts.get(category, 0) + int(n)
    return {c: n / total for c, n in sorted(counts.items(), key=lambda kv: -kv[1])} if total else {}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds(postmaster: int | None) -> float | None:
    """CPU time of the whole PostgreSQL server: the postmaster, its reaped children, and its
    live children (backends, WAL writer, checkpointer). None when it is not on this machine."""
    if postmaster is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
        total = sum(int(fields[i]) for i in (11, 12, 13, 14))
        children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            f = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile: counted in the postmaster's cutime from now on
        total += int(f[11]) + int(f[12])
    return total / tick


async def postmaster_pid(dsn: str) -> int | None:
    conn = await asyncpg.connect(dsn)
    try:
        backend = int(await conn.fetchval("SELECT pg_backend_pid()"))
        # read while the backend lives: once closed it may be gone before /proc is read
        try:
            return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    finally:
        await conn.close()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class Driver:
    def __init__(
        self, url: str, http: aiohttp.ClientSession, waiters: Waiters, fakes: PlatformFakes
    ) -> None:
        self.url = url
        self.fakes = fakes
        self.http = http
        self.waiters = waiters
        self._tokens = itertools.count(1)
        self._streams: list[asyncio.Task[None]] = []
        self.web_threads = [f"wt{i}" for i in range(WEB_THREADS)]
        self._threads = itertools.count()
        #: replicas behind a load balancer: sink messages rotate over these
        self.sink_urls = [url]
        self.thread_prefix = ""

    def reuse_from(self, first_token: int, *, prefix: str) -> None:
        """Tokens (event ids) from ``first_token`` and threads named with ``prefix``, for a
        driver on a database that earlier drivers used."""
        self._tokens = itertools.count(first_token)
        self.thread_prefix = prefix

    def next_thread(self) -> int:
        return next(self._threads)

    async def open_web_streams(self) -> None:
        ready = [asyncio.Event() for _ in self.web_threads]
        for thread, event in zip(self.web_threads, ready, strict=True):
            self._streams.append(
                asyncio.create_task(self._stream(thread, event), name=f"sse-{thread}")
            )
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 30)

    async def close(self) -> None:
        for task in self._streams:
            task.cancel()
        for task in self._streams:
            with suppress(asyncio.CancelledError, aiohttp.ClientError):
                await task

    async def _stream(self, thread: str, ready: asyncio.Event) -> None:
        url = f"{self.url}/web/api/channels/bench/threads/{thread}/stream"
        async with self.http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as response:
            ready.set()
            async for raw in response.content:
                line = raw.decode().strip()
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    if event.get("type") == "reply":
                        self.waiters.arrived(event["text"])

    async def send(self, surface: str, thread: str) -> asyncio.Event:
        """Send one message; the returned event is set when its reply lands."""
        token = next(self._tokens)
        text = f"benchmark message zq{token}qz lorem ipsum dolor sit amet"
        done = self.waiters.expect(token, surface, thread if surface == "sink" else None)
        if surface in self.fakes.platforms:
            await self.fakes.send(surface, token, text)
            return done
        if surface == "web":
            body = {"text": text, "client_msg_id": f"w{token}", "thread_id": thread}
            path = "/web/api/channels/bench/messages"
        else:
            body = {"chat": "bench", "thread": thread, "id": f"s{token}", "text": text}
            body["event_id"] = f"ev{token}"
            path = "/sink/inbound"
        base = self.url if surface == "web" else self.sink_urls[token % len(self.sink_urls)]
        async with self.http.post(base + path, json=body) as response:
            if response.status != 200:
                raise RuntimeError(f"{path} answered {response.status}: {await response.text()}")
            await response.read()
        return done


async def _await_reply(done: asyncio.Event, timeout: float = 30.0) -> None:
    await asyncio.wait_for(done.wait(), timeout)


#: surfaces measured against a real server, not a local fake: their latency includes its own
REAL_SERVERS = frozenset({"matrix"})


def quiet_heap() -> None:
    """Before a timed phase: what the load generator holds so far (the fakes' records, the
    clients, Synapse's room) is collected once and left out of later collections. Unfrozen,
    its full collections took 38-112 ms (``gc.callbacks``, a quick run), and replies that
    arrived meanwhile were timed as late: the instrument's pause, not the gateway's."""
    gc.collect()
    gc.freeze()


async def fixed_rate(driver: Driver, *, rate: float, seconds: float) -> dict[str, float]:
    """Open loop: ``rate`` msgs/s offered, rotating over the surfaces: web threads (ongoing
    conversations, each with one message in flight at most, so each gets its own reply), and
    new threads (new sessions) on the sink and each platform fake; p50/p99, what was lost."""
    waiters = driver.waiters
    waiters.clear()
    quiet_heap()
    total = int(rate * seconds)
    pending: set[asyncio.Task[None]] = set()
    idle_web = list(driver.web_threads)
    surfaces = ["web", "sink", *driver.fakes.platforms]
    lost = 0
    started = time.perf_counter()

    async def one(surface: str, thread: str) -> None:
        nonlocal lost
        try:
            await _await_reply(await driver.send(surface, thread))
        except TimeoutError:
            lost += 1
        finally:
            if surface == "web":
                idle_web.append(thread)

    for i in range(total):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        surface = surfaces[i % len(surfaces)]
        if surface == "web" and idle_web:
            thread = idle_web.pop(0)
        else:
            if surface == "web" or not driver.fakes.available(surface):
                surface = "sink"
            thread = f"fr{driver.next_thread()}"
        task = asyncio.create_task(one(surface, thread), name="e2e-message")
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)
    elapsed = time.perf_counter() - started
    lat = waiters.latencies
    out = {
        "offered_rate": rate,
        "rate": len(lat) / elapsed,
        "p50_ms": pct(lat, 0.5) * 1000,
        "p99_ms": pct(lat, 0.99) * 1000,
        "lost": float(lost),
    }
    # the gateway's own tail: Matrix runs on a real homeserver, whose two /sync hops (about
    # 80-100 ms) would be the p99 of every mix it is 1% or more of
    local = [v for s, vs in waiters.by_surface.items() if s not in REAL_SERVERS for v in vs]
    if local and len(local) < len(lat):
        out["p99_local_ms"] = pct(local, 0.99) * 1000
    for surface, values in sorted(waiters.by_surface.items()):
        out[f"{surface}_p50_ms"] = pct(values, 0.5) * 1000
        out[f"{surface}_share"] = len(values) / max(1, len(lat))
    return out


#: the stages of one message, as the gateway's log and the driver see it
TAIL_STAGES = (
    ("ingest", "sent -> stored (HTTP, intake, the ingest transaction)"),
    ("queue", "stored -> its turn claimed (waiting for a turn worker)"),
    ("turn", "claim, context, agent, finish transaction"),
    ("delivery", "finished -> at the platform (handoff, pacing, send)"),
)


def tail_breakdown(log_path: Path, threads: dict[str, list[float]]) -> dict[str, Any]:
    """Where the time of the slowest 1% of sink messages goes, against the median message:
    each answered message's stages (``TAIL_STAGES``) from the gateway's own log lines
    (``inbound_stored``, ``turn_finished`` with its duration) and the driver's clocks."""
    seen: dict[str, dict[str, Any]] = {}
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        if not line.startswith("{") or '"thread_id"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        thread = record.get("thread_id")
        if thread not in threads or record.get("event") not in ("inbound_stored", "turn_finished"):
            continue
        stamp = record.get("timestamp")
        if not isinstance(stamp, str):
            continue
        at = datetime.fromisoformat(stamp).timestamp()
        seen.setdefault(thread, {})[record["event"]] = (at, record.get("duration_ms"))
    rows = []
    for thread, clocks in threads.items():
        found = seen.get(thread, {})
        if len(clocks) < 3 or "inbound_stored" not in found or "turn_finished" not in found:
            continue
        sent, arrived, latency = clocks
        stored = found["inbound_stored"][0]
        finished, duration_ms = found["turn_finished"]
        turn = (duration_ms or 0.0) / 1000
        rows.append(
            (
                latency,
                {
                    "ingest": stored - sent,
                    "queue": finished - turn - stored,
                    "turn": turn,
                    "delivery": arrived - finished,
                },
            )
        )
    if not rows:
        return {}
    rows.sort(key=lambda r: r[0])
    slowest = rows[-max(1, len(rows) // 100) :]
    middle = rows[len(rows) // 2 - max(1, len(rows) // 100) // 2 :][: max(1, len(rows) // 100)]

    def mean_ms(group: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
        out = {s: sum(r[1][s] for r in group) / len(group) * 1000 for s, _ in TAIL_STAGES}
        out["total"] = sum(r[0] for r in group) / len(group) * 1000
        return out

    return {"messages": len(rows), "slowest": mean_ms(slowest), "median": mean_ms(middle)}


async def drained(dsn: str, *, within: float = 120.0) -> float:
    """Wait until the gateway has no turn waiting and no delivery open (an overloaded fixed
    rate leaves a backlog: replies given up on are still owed): the sustained phase then
    measures its own messages, not the drain of earlier ones. Returns the seconds waited."""
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        while time.perf_counter() - started < within:
            busy = await conn.fetchval(
                "SELECT (SELECT count(*) FROM sessions WHERE turn_requested_seq > turn_done_seq)"
                " + (SELECT count(*) FROM deliveries WHERE status IN ('pending', 'sending'))"
            )
            if not busy:
                break
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    return time.perf_counter() - started


def _diff(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def database_cost(
    before: dict[str, Any], after: dict[str, Any], messages: int, pg_cpu: float | None
) -> dict[str, Any]:
    """PostgreSQL's own cost per message between two snapshots."""
    cost = db_cost(before, after)
    n = max(1, messages)
    return {
        "db_transactions_per_msg": cost.transactions / n,
        "db_transactions_by_kind": None
        if cost.kinds is None
        else {kind: count / n for kind, count in cost.kinds.items()},
        "db_wal_bytes_per_msg": cost.wal_bytes / n,
        "db_exec_ms_per_msg": None if cost.exec_ms is None else cost.exec_ms / n,
        "db_cpu_ms_per_msg": None if pg_cpu is None else pg_cpu / n * 1000,
        "db_statements": [
            {
                "calls_per_msg": calls / n,
                "ms_per_msg": ms / n,
                "rows_per_call": rows / max(1, calls),
                "wal_bytes_per_msg": wal / n,
                "query": query,
            }
            for calls, ms, rows, wal, query in cost.statements
        ],
    }


async def sustained(
    driver: Driver,
    pid: int | list[int],
    *,
    sessions: int,
    concurrency: int,
    max_seconds: float,
    samples: int = 5,
) -> dict[str, Any]:
    """Closed loop over new sessions (sink and platform fakes) until ``sessions`` were served or
    ``max_seconds`` passed; msgs/s and RSS along the way."""
    waiters = driver.waiters
    waiters.clear()
    quiet_heap()
    counter = itertools.count()
    checkpoints = {max(1, sessions * k // samples) for k in range(1, samples + 1)}
    checkpoints |= {max(1, sessions * k // (4 * samples)) for k in range(1, 4 * samples)}
    rss: list[tuple[int, int]] = []
    served = 0

    deadline = time.perf_counter() + max_seconds
    surfaces = ["sink", *driver.fakes.platforms]

    async def worker() -> None:
        nonlocal served
        for n in counter:
            if n >= sessions or time.perf_counter() > deadline:
                return
            surface = surfaces[n % len(surfaces)]
            if surface != "sink" and not driver.fakes.available(surface):
                surface = "sink"
            await _await_reply(await driver.send(surface, f"{driver.thread_prefix}new{n}"))
            served += 1
            if served in checkpoints:
                rss.append((served, rss_bytes(first)))

    pids = pid if isinstance(pid, list) else [pid]
    first = pids[0]
    started = time.perf_counter()
    cpu_before = sum(cpu_seconds(p) for p in pids)
    # the load generator's own: this process (the fakes, the receiver, the clients)
    own_before = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    cpu = sum(cpu_seconds(p) for p in pids) - cpu_before
    own = time.process_time() - own_before
    rss.sort()
    lat = waiters.latencies
    if not rss or rss[-1][0] != served:
        rss.append((served, rss_bytes(first)))
    return {
        "rate": served / elapsed,
        "p50_ms": pct(lat, 0.5) * 1000,
        "p99_ms": pct(lat, 0.99) * 1000,
        "sessions": served,
        "sessions_planned": sessions,
        "concurrency": concurrency,
        "rss_mb": [(n, round(b / 2**20, 1)) for n, b in rss],
        "gateway_cpu_ms_per_msg": cpu / max(1, served) * 1000,
        "load_generator_cpu_ms_per_msg": own / max(1, served) * 1000,
    }


@dataclass
class E2E:
    dsn: str
    rates: tuple[float, ...]
    seconds: float
    sessions: int
    concurrency: int = 32
    max_seconds: float = 600.0
    profile: bool = False
    platforms: bool = True
    #: the platform fakes to drive (``--surfaces``); None: every one that answers
    surfaces: frozenset[str] | None = None
    #: seconds of each closed loop of the 1-versus-3-replicas comparison (0: skipped)
    scale_seconds: float = 0.0
    #: whose code the gateway process runs (``--baseline``: another checkout)
    repo: Path = REPO
    #: seconds a database snapshot waits for the backends' counters (``db_snapshot``)
    stats_settle: float = 1.2
    _phase: int = 0
    log_path: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-bench-e2e-")) / "gateway.log"
    )

    async def scale_out(self, runs: int, replicas: tuple[int, ...] = (1, 3)) -> dict[str, Any]:
        """The same closed loop (sink surface, new sessions) against 1 and against 3 gateway
        processes on one database, interleaved per run; the ratio is taken per run."""
        figures: dict[int, list[dict[str, Any]]] = {n: [] for n in replicas}
        for _ in range(runs):
            for n in replicas:
                figures[n].append(await self._replicas(n))
        base = figures[replicas[0]]
        ratios = {
            n: [f["rate"] / max(b["rate"], 1e-9) for f, b in zip(figs, base, strict=True)]
            for n, figs in figures.items()
        }
        return {"runs": {str(n): f for n, f in figures.items()}, "ratio": ratios}

    async def _replicas(self, n: int) -> dict[str, Any]:
        waiters = Waiters()
        receiver = Receiver(waiters)
        await receiver.start()
        fakes = PlatformFakes(waiters)  # not started: the sink surface only
        logs = Path(tempfile.mkdtemp(prefix="gw-bench-scale-"))
        try:
            async with AsyncExitStack() as stack:
                # the replicas start side by side (each one's start-up is seconds of imports)
                up = await enter_side_by_side(
                    stack,
                    (
                        gateway_process(
                            self.dsn,
                            receiver.url,
                            logs / f"replica-{n}-{i}.log",
                            {},
                            repo=self.repo,
                        )
                        for i in range(n)
                    ),
                )
                procs = [proc for proc, _ in up]
                urls = [url for _, url in up]
                http = await stack.enter_async_context(
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))
                )
                driver = Driver(urls[0], http, waiters, fakes)
                driver.sink_urls = urls
                # new event ids and threads: the database holds the earlier phases' (their
                # redelivery would be answered ``duplicate``, and never replied to)
                self._phase += 1
                driver.reuse_from(self._phase * 10_000_000, prefix=f"s{self._phase}-")
                postmaster = await postmaster_pid(self.dsn)
                before = await db_snapshot(self.dsn, settle=self.stats_settle)
                pg_cpu = postgres_cpu_seconds(postmaster)
                load = await sustained(
                    driver,
                    [p.pid for p in procs],
                    sessions=self.sessions,
                    concurrency=self.concurrency,
                    max_seconds=self.scale_seconds,
                )
                pg_cpu_after = postgres_cpu_seconds(postmaster)
                load.update(
                    database_cost(
                        before,
                        await db_snapshot(self.dsn, settle=self.stats_settle),
                        load["sessions"],
                        _diff(pg_cpu, pg_cpu_after),
                    )
                )
                load["replicas"] = n
                load["rate_per_replica"] = load["rate"] / n
        finally:
            await receiver.stop()
        shutil.rmtree(logs, ignore_errors=True)  # kept only when something failed
        return load

    async def run(self, runs: int) -> dict[str, Any]:
        waiters = Waiters()
        receiver = Receiver(waiters)
        await receiver.start()
        fakes = PlatformFakes(waiters, self.surfaces)
        if self.platforms:
            await fakes.start()
        else:
            fakes.skipped["platforms"] = "not asked for"
        try:
            async with (
                gateway_process(
                    self.dsn, receiver.url, self.log_path, fakes.env, repo=self.repo
                ) as (proc, url),
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200)) as http,
            ):
                fakes.connect(url)
                driver = Driver(url, http, waiters, fakes)
                await driver.open_web_streams()
                for platform in fakes.platforms:
                    # the adapter connects (polling, websocket) after start: first answer
                    try:
                        await _await_reply(await driver.send(platform, "hello"), timeout=20)
                    except (TimeoutError, RuntimeError) as exc:
                        fakes.drop(platform, f"no answer through the fake: {exc!r}")
                try:
                    rss_start = rss_bytes(proc.pid)
                    warm = min(2.0, self.seconds)
                    await fixed_rate(driver, rate=min(self.rates), seconds=warm)
                    latency: dict[float, list[dict[str, float]]] = {}
                    tails: dict[float, list[dict[str, Any]]] = {}
                    upkeep: dict[float, list[dict[str, Any]]] = {}
                    for _ in range(runs):
                        for rate in self.rates:
                            # PostgreSQL's vacuums, analyzes and checkpoints meanwhile: a
                            # tail they cause is theirs (``benchmarks.maintenance``)
                            async with Maintenance(self.dsn) as maintenance:
                                figure = await fixed_rate(driver, rate=rate, seconds=self.seconds)
                            upkeep.setdefault(rate, []).append(
                                {"p99_ms": figure["p99_ms"], **maintenance.summary()}
                            )
                            # where the slowest 1% spent their time (the gateway's log)
                            await asyncio.sleep(0.2)
                            tails.setdefault(rate, []).append(
                                tail_breakdown(self.log_path, dict(waiters.sink_threads))
                            )
                            latency.setdefault(rate, []).append(figure)
                            # let a backlog of an overloaded rate drain before the next one
                            await asyncio.sleep(0.5)
                    drain_seconds = await drained(self.dsn)
                    postmaster = await postmaster_pid(self.dsn)
                    before = await db_snapshot(self.dsn, settle=self.stats_settle)
                    pg_cpu = postgres_cpu_seconds(postmaster)
                    spy = None
                    if self.profile:
                        spy = await py_spy(
                            proc.pid, min(30.0, self.max_seconds), self.log_path.parent / "prof"
                        )
                    load = await sustained(
                        driver,
                        proc.pid,
                        sessions=self.sessions,
                        concurrency=self.concurrency,
                        max_seconds=self.max_seconds,
                    )
                    pg_cpu_after = postgres_cpu_seconds(postmaster)
                    load.update(
                        database_cost(
                            before,
                            await db_snapshot(self.dsn, settle=self.stats_settle),
                            load["sessions"],
                            _diff(pg_cpu, pg_cpu_after),
                        )
                    )
                    if spy is not None:
                        await spy.wait()
                        load["profile"] = profile_breakdown(self.log_path.parent / "prof")
                        keep = os.environ.get("BENCH_PROFILE_COPY")
                        if keep and (self.log_path.parent / "prof").exists():
                            # py-spy's raw stacks, for a closer look than the categories
                            shutil.copy(self.log_path.parent / "prof", keep)
                    load["rss_mb_at_start"] = round(rss_start / 2**20, 1)
                    load["backlog_drain_seconds"] = round(drain_seconds, 1)
                    load["stray_replies"] = waiters.stray
                finally:
                    await driver.close()
        finally:
            await receiver.stop()
            await fakes.stop()
        # the gateway's log is only worth keeping when something failed (raised above)
        if not os.environ.get("BENCH_KEEP_LOG"):
            shutil.rmtree(self.log_path.parent, ignore_errors=True)
        load["surfaces"] = ["web", "sink", *fakes.platforms]
        load["skipped_surfaces"] = fakes.skipped
        return {
            "latency_runs": latency,
            "sustained": load,
            "tails": tails,
            "maintenance": upkeep,
        }
