"""Long-form ingress fuzzing: ``python -m benchmarks --only fuzz [--count N] [--seed S]``.

One real ``gateway run`` process with every surface on: Telegram in webhook mode, Slack's
Events API (signed), Mattermost's websocket and the web chat, each platform served by its fake
(``testsupport/fakes``: real local servers the real client libraries talk to). ``count``
generated inbound events per platform go through each real ingress:

- Telegram: ``POST /telegram/webhook`` with the secret header;
- Slack: ``POST /slack/events``, signed (v0) over exactly the bytes sent;
- Mattermost: frames pushed by the fake's server over the gateway's own websocket;
- web chat: ``POST /web/api/channels/{channel}/messages``.

Events are seeded from the real payloads in ``../shared/payloads/`` (and the fakes' own shapes)
and mutated hypothesis-style, from a seeded generator: NUL and lone surrogates in strings,
out-of-range and non-finite numbers, wrong types, missing and extra keys, deep nesting,
oversized strings and bodies, truncated JSON, invalid UTF-8, non-objects, empty bodies.

Every 50th event of each platform is a good one carrying a token; the agent answers only
those. Checked: no 5xx and no dropped connection ever, the process alive and ``/healthz`` ok at
the end, bad input answered 4xx or stored as a dead letter with its reason (counted from the
inbox), and every good event answered exactly once in its own thread, after all the bad ones
before it."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import re
import signal
import socket
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from campaigns.faults import start_replica
from gateway.agents.base import Turn
from gateway.core.domain import Reply
from testsupport.pg import Postgres

PLATFORMS = ("telegram", "slack", "mattermost", "web")
#: the real payloads (``../shared/payloads`` beside the checkout, or beside the tree above it);
#: without them the fakes' own shapes seed the generator alone
PAYLOADS = next(
    (
        p / "shared" / "payloads"
        for p in Path(__file__).resolve().parents[1:4]
        if (p / "shared" / "payloads").is_dir()
    ),
    Path("shared/payloads"),
)
GOOD_EVERY = 50
TOKEN = re.compile(r"zq(\d+)qz")
WEBHOOK_SECRET = "fuzz-webhook-secret"
WEB_CHANNEL = "fuzz"
#: GATEWAY_MAX_BODY_BYTES's default: the generator sends some bodies just over it
BODY_LIMIT = 1_048_576


class FuzzAgent:
    """Answers only the good events (their token), so the generated ones that are stored do
    not queue thousands of paced sends; everything stored still runs a turn."""

    name = "fuzz"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        tokens = [t for m in turn.new_messages for t in TOKEN.findall(m.content)]
        return [Reply(text=" ".join(f"ok zq{t}qz" for t in tokens))] if tokens else []


# --- generation ---------------------------------------------------------------------------


def _load_seeds(prefix: str) -> list[Any]:
    seeds = []
    if PAYLOADS.is_dir():
        for path in sorted(PAYLOADS.glob(f"{prefix}*.json")):
            try:
                seeds.append(json.loads(path.read_text()))
            except ValueError:
                continue
    return seeds


class Mutator:
    """Seeded, hypothesis-style mutations of a JSON document and of its bytes."""

    def __init__(self, rng: random.Random, *, max_body: int, oversize: float = 0.02) -> None:
        self.rng = rng
        self.max_body = max_body
        #: share of bodies just over ``max_body``
        self.oversize = oversize

    def strings(self) -> str:
        r = self.rng
        return r.choice(
            [
                "nul\x00inside",
                "\x00",
                "lone \ud800 surrogate",
                "\udfff",
                "rtl \u202e and zero\u200bwidth",
                "emoji 🧪" * r.randint(1, 50),
                "x" * r.choice([4097, 40_000, 300_000]),
                "",
                " ",
                "<@U0BOT> " * 20,
                "/new",
                "%s%n{0}${x}",
            ]
        )

    def scalar(self) -> Any:
        r = self.rng
        return r.choice(
            [
                2**63,
                -(2**63) - 1,
                2**128,
                -(2**200),
                1e308,
                float("inf"),
                float("-inf"),
                float("nan"),
                0,
                -1,
                1.5,
                True,
                None,
                self.strings(),
                [],
                {},
                [self.strings()],
                {"nested": self.strings()},
            ]
        )

    def _paths(self, doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        out = [prefix]
        if isinstance(doc, dict):
            for k, v in doc.items():
                out.extend(self._paths(v, (*prefix, k)))
        elif isinstance(doc, list):
            for i, v in enumerate(doc):
                out.extend(self._paths(v, (*prefix, i)))
        return out

    def mutate(self, doc: Any, times: int) -> Any:
        doc = copy.deepcopy(doc)
        for _ in range(times):
            paths = [p for p in self._paths(doc) if p]
            if not paths:
                return self.scalar()
            path = self.rng.choice(paths)
            parent = doc
            for step in path[:-1]:
                parent = parent[step]
            last = path[-1]
            old = parent[last]
            choice = self.rng.random()
            if choice < 0.15 and isinstance(parent, dict):
                del parent[last]
            elif choice < 0.25 and isinstance(parent, dict):
                parent[f"x_fuzz_{self.rng.randrange(99)}"] = self.scalar()
            elif isinstance(old, str) and choice < 0.7:
                cut = self.rng.randrange(len(old) + 1)
                parent[last] = old[:cut] + self.strings() + old[cut:]
            elif isinstance(old, int | float) and not isinstance(old, bool) and choice < 0.7:
                parent[last] = self.rng.choice(
                    [2**63, -(2**63) - 1, 2**64, 10**30, float("inf"), float("nan"), -old]
                )
            else:
                parent[last] = self.scalar()
        return doc

    def body(self, doc: Any) -> bytes:
        """The bytes sent: usually the (mutated) document, sometimes broken bytes."""
        r = self.rng
        kind = r.random()
        if kind < 0.04:
            return b""
        if kind < 0.08:
            return r.choice([b"[]", b"null", b"42", b'"text"', b"[{}]", b"true"])
        if kind < 0.10:
            depth = r.choice([200, 5000, 100_000])
            return b'{"a":' * depth + b"1" + b"}" * depth
        if kind < 0.10 + self.oversize:
            return b'{"text": "' + b"y" * (self.max_body + 1024) + b'"}'
        text = json.dumps(doc, ensure_ascii=r.random() < 0.5, allow_nan=True)
        raw = text.encode("utf-8", "surrogatepass")
        if kind < 0.20:
            return raw[: r.randrange(max(len(raw), 1))]
        if kind < 0.25:
            at = r.randrange(len(raw) + 1)
            return raw[:at] + r.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]) + raw[at:]
        if kind < 0.28:
            return raw + b"," + raw  # trailing data
        return raw


# --- the run --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Fuzz:
    count: int
    seed: int
    dsn: str | None = None
    concurrency: int = 8
    logdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-fuzz-")))
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    #: Mattermost: frames pushed while the gateway was closing its socket
    socket_closes: int = 0
    #: Mattermost: frames over the gateway's 1 MiB websocket limit (it closes with 1009)
    oversized_frames: int = 0
    #: oversized bodies refused with the connection closed before the client finished writing
    closed_early: dict[str, int] = field(default_factory=dict)
    #: token -> (platform, where it must be answered)
    good: dict[str, tuple[str, Any]] = field(default_factory=dict)

    async def run(self) -> dict[str, Any]:
        import logging

        from testsupport.fakes import slack as slack_fake
        from testsupport.fakes.mattermost import FakeMattermost
        from testsupport.fakes.telegram import FakeTelegram

        # the fakes' servers log each connection the gateway drops, and each bad frame
        logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
        rng = random.Random(self.seed)
        pg: Postgres | None = None
        dsn = self.dsn
        if dsn is None:
            pg = await asyncio.to_thread(Postgres, "gw_fuzz")
            await pg.create()
            dsn = pg.dsn
        tg, sl, mm = FakeTelegram(), slack_fake.FakeSlack(), FakeMattermost()
        for fake in (tg, sl, mm):
            await fake.start()
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update(
            {
                "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                "DATABASE_URL": dsn,
                "GATEWAY_HTTP_PORT": str(port),
                "AGENT": "campaigns.fuzz:FuzzAgent",
                "GATEWAY_LOG_LEVEL": "warning",
                "TELEGRAM_BOT_TOKEN": tg.token,
                "TELEGRAM_API_BASE_URL": tg.base_url,
                "TELEGRAM_MODE": "webhook",
                "TELEGRAM_WEBHOOK_URL": f"http://127.0.0.1:{port}/telegram/webhook",
                "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
                "SLACK_BOT_TOKEN": slack_fake.BOT_TOKEN,
                "SLACK_SIGNING_SECRET": slack_fake.SIGNING_SECRET,
                "SLACK_API_BASE_URL": sl.api_url,
                "MATTERMOST_URL": mm.url,
                "MATTERMOST_TOKEN": str(mm.bot.token),
            }
        )
        replica = await start_replica(0, env, self.logdir)
        url = replica.url
        sl.events_url = f"{url}/slack/events"
        client = httpx.AsyncClient(timeout=60)
        started = time.monotonic()
        try:
            await _connected(mm)
            body_limit = BODY_LIMIT
            mutator = Mutator(rng, max_body=body_limit)
            await asyncio.gather(
                self._telegram(client, url, tg, mutator, random.Random(rng.random())),
                self._slack(client, sl, Mutator(random.Random(rng.random()), max_body=body_limit)),
                # a frame over 1 MiB closes the socket (1009) and costs a reconnect, whose
                # backoff grows while the socket flaps: a few, sent on their own (below)
                self._mattermost(
                    mm, Mutator(random.Random(rng.random()), max_body=body_limit, oversize=0.0)
                ),
                self._web(client, url, Mutator(random.Random(rng.random()), max_body=body_limit)),
            )
            offered_seconds = time.monotonic() - started
            answers = await self._wait_answers(client, url, tg, sl, mm)
            healthy = (await client.get(f"{url}/healthz")).status_code == 200
            alive = replica.alive
            inbox = await _inbox(dsn)
        finally:
            if replica.alive:
                replica.proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(replica.proc.wait(), 30)
                except TimeoutError:
                    replica.proc.kill()
            await client.aclose()
            for fake in (tg, sl, mm):
                await (fake.close() if isinstance(fake, FakeMattermost) else fake.stop())
            if pg is not None:
                await asyncio.to_thread(pg.cleanup)
        return self._report(answers, inbox, healthy, alive, offered_seconds, mm)

    # --- each ingress ---------------------------------------------------------------------

    async def _send_all(self, platform: str, sends: Any) -> None:
        """Run ``sends`` (an iterator of coroutines) ``concurrency`` at a time."""
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=self.concurrency * 2)
        statuses = self.statuses.setdefault(platform, Counter())
        errors = self.errors.setdefault(platform, [])

        async def worker() -> None:
            while True:
                job = await queue.get()
                if job is None:
                    return
                try:
                    status = await job
                    statuses[status] += 1
                except Exception as exc:  # noqa: BLE001 - a dropped connection is a finding
                    errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}"[:200])

        workers = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
        for job in sends:
            await queue.put(job)
        for _ in workers:
            await queue.put(None)
        await asyncio.gather(*workers)

    async def _http(
        self,
        platform: str,
        client: httpx.AsyncClient,
        url: str,
        body: bytes,
        headers: dict[str, str],
    ) -> int:
        """POST ``body``; an oversized body may be refused (413) before it is read whole, and
        the server then closes the connection while the client still writes: counted as
        refused early, not as a dropped connection."""
        try:
            response = await client.post(url, content=body, headers=headers)
        except httpx.TransportError:
            if len(body) > BODY_LIMIT:
                self.closed_early[platform] = self.closed_early.get(platform, 0) + 1
                return 413
            raise
        return response.status_code

    async def _telegram(
        self,
        client: httpx.AsyncClient,
        url: str,
        tg: Any,
        mutator: Mutator,
        rng: random.Random,
    ) -> None:
        seeds = [s for s in _load_seeds("telegram_update") if isinstance(s, dict)]
        dm = tg.private(tg.user())
        seeds.append({"message": tg.user_says(dm, "seed message")})
        tg.sent.clear()
        headers = {"X-Telegram-Bot-Api-Secret-Token": WEBHOOK_SECRET}

        async def post(body: bytes) -> int:
            return await self._http(
                "telegram",
                client,
                f"{url}/telegram/webhook",
                body,
                {**headers, "Content-Type": "application/json"},
            )

        def jobs() -> Any:
            for n in range(self.count):
                if n % GOOD_EVERY == GOOD_EVERY - 1:
                    token = f"{len(self.good)}"
                    chat = tg.private(tg.user())
                    message = tg.user_says(chat, f"good zq{token}qz")
                    # the fake's pusher delivers it (its update id); posted here again under
                    # another update id: the same message, stored and answered once
                    self.good[token] = ("telegram", (chat.id, None))
                    again = {"update_id": 900_000_000 + n, "message": message}
                    yield post(json.dumps(again).encode())
                    continue
                doc = copy.deepcopy(rng.choice(seeds))
                doc["update_id"] = 800_000_000 + n
                for key in ("message", "edited_message"):
                    if isinstance(doc.get(key), dict):
                        doc[key]["message_id"] = 10_000 + n
                yield post(mutator.body(mutator.mutate(doc, rng.randint(1, 3))))

        await self._send_all("telegram", jobs())

    async def _slack(self, client: Any, sl: Any, mutator: Mutator) -> None:
        from testsupport.fakes import slack as slack_fake

        rng = mutator.rng
        seeds = [
            s
            for s in _load_seeds("slack_event")
            if isinstance(s, dict) and s.get("type") == "event_callback"
        ]
        sl.add_channel("C0FUZZ")
        seeds.append(
            sl.wrap(
                {
                    "type": "app_mention",
                    "user": slack_fake.HUMAN,
                    "text": f"<@{sl.bot_user_id}> seed",
                    "ts": sl.next_ts(),
                    "channel": "C0FUZZ",
                }
            )
        )

        async def post(body: bytes) -> int:
            # as the fake's Events API pusher sends it: signed over exactly these bytes
            headers = {**sl.sign(body), "Content-Type": "application/json"}
            return await self._http("slack", client, sl.events_url, body, headers)

        async def good(token: str, channel: str) -> int:
            posted = await sl.user_posts(channel, f"<@{sl.bot_user_id}> good zq{token}qz")
            self.good[token] = ("slack", (channel, posted.ts))
            return 200

        def jobs() -> Any:
            for n in range(self.count):
                if n % GOOD_EVERY == GOOD_EVERY - 1:
                    token = f"{len(self.good)}"
                    self.good[token] = ("slack", None)
                    channel = sl.add_channel(f"CG{token}").id
                    yield good(token, channel)
                    continue
                doc = copy.deepcopy(rng.choice(seeds))
                doc["event_id"] = f"EvFUZZ{n}"
                if isinstance(doc.get("event"), dict):
                    doc["event"]["ts"] = f"{1_700_000_000 + n}.{n:06d}"
                yield post(mutator.body(mutator.mutate(doc, rng.randint(1, 3))))

        await self._send_all("slack", jobs())

    async def _mattermost(self, mm: Any, mutator: Mutator) -> None:
        rng = mutator.rng
        channel = mm.town_square
        alice = mm.user_by_name("alice")
        own = {
            "event": "posted",
            "data": {
                "channel_display_name": "Town Square",
                "channel_name": "town-square",
                "channel_type": "O",
                "post": json.dumps({"id": "seed", "root_id": "", "message": "seed"}),
                "sender_name": "@alice",
                "team_id": "",
                "mentions": json.dumps([mm.bot.id]),
            },
            "broadcast": {"channel_id": channel.id},
            "seq": 1,
        }
        seeds = [
            s
            for s in [*_load_seeds("mattermost_ws_posted"), own]
            if isinstance(s, dict) and isinstance(s.get("data"), dict)
        ]
        for seed in seeds:  # in a channel the bot is in, by a person it knows
            seed.setdefault("broadcast", {})["channel_id"] = channel.id
            try:
                post = json.loads(seed["data"]["post"])
            except (KeyError, TypeError, ValueError):
                continue
            post.update(
                channel_id=channel.id,
                user_id=alice.id,
                message=f"@{mm.bot.username} {post.get('message', '')}",
            )
            seed["data"]["post"] = json.dumps(post)
        statuses = self.statuses.setdefault("mattermost", Counter())
        oversized_at = {self.count // 3, 2 * self.count // 3}
        for n in range(self.count):
            if n % GOOD_EVERY == GOOD_EVERY - 1:
                token = f"{len(self.good)}"
                self.good[token] = ("mattermost", None)
                posted = await mm.user_posts(channel, f"good zq{token}qz", mention_bot=True)
                self.good[token] = ("mattermost", (channel.id, posted["id"]))
                statuses[0] += 1
                continue
            doc = copy.deepcopy(rng.choice(seeds))
            inner_mutated = False
            if rng.random() < 0.6 and isinstance(doc["data"].get("post"), str):
                try:
                    post = json.loads(doc["data"]["post"])
                    post["id"] = f"fuzz{n:022d}"[:26]
                    post["create_at"] = 1_700_000_000_000 + n
                    post = mutator.mutate(post, rng.randint(1, 3))
                    doc["data"]["post"] = json.dumps(post, allow_nan=True)
                    inner_mutated = True
                except ValueError:
                    pass
            if not inner_mutated or rng.random() < 0.3:
                doc = mutator.mutate(doc, rng.randint(1, 2))
            doc = doc if isinstance(doc, dict) else {"event": "posted", "data": doc}
            raw = mutator.body(doc)
            if n in oversized_at:
                raw = b'{"event": "posted", "data": {"post": "' + b"y" * (2**20 + 1024) + b'"}}'
                self.oversized_frames += 1
            # a websocket text frame is UTF-8: invalid bytes cannot be sent as text
            text = raw.decode("utf-8", "replace")
            if mm.live_connections == 0:
                # the gateway closed its socket (a frame over its 1 MiB limit): it reconnects
                await _connected(mm)
                if mm.live_connections == 0:
                    self.errors.setdefault("mattermost", []).append(
                        f"no websocket 90 s after frame {n}"
                    )
            try:
                await mm.push_raw(text)
            except ConnectionError:
                self.socket_closes += 1  # closing as we wrote: counted, then reconnected
            statuses[0] += 1
            if n % 20 == 0:
                await asyncio.sleep(0)  # let the fake's server breathe

    async def _web(self, client: httpx.AsyncClient, url: str, mutator: Mutator) -> None:
        rng = mutator.rng
        seeds: list[Any] = [
            {"text": "hello", "client_msg_id": "seed"},
            {"text": "hello there", "client_msg_id": "seed", "thread_id": "t"},
        ]

        async def post(body: bytes) -> int:
            return await self._http(
                "web",
                client,
                f"{url}/web/api/channels/{WEB_CHANNEL}/messages",
                body,
                {"Content-Type": "application/json"},
            )

        async def good(token: str) -> int:
            thread = f"good{token}"
            response = await client.post(
                f"{url}/web/api/channels/{WEB_CHANNEL}/messages",
                json={"text": f"good zq{token}qz", "client_msg_id": thread},
            )
            self.good[token] = ("web", thread)
            return response.status_code

        def jobs() -> Any:
            for n in range(self.count):
                if n % GOOD_EVERY == GOOD_EVERY - 1:
                    token = f"{len(self.good)}"
                    self.good[token] = ("web", None)
                    yield good(token)
                    continue
                doc = copy.deepcopy(rng.choice(seeds))
                doc["client_msg_id"] = f"fz{n}"
                yield post(mutator.body(mutator.mutate(doc, rng.randint(1, 2))))

        await self._send_all("web", jobs())

    # --- the checks -----------------------------------------------------------------------

    async def _wait_answers(
        self, client: httpx.AsyncClient, url: str, tg: Any, sl: Any, mm: Any
    ) -> dict[str, list[Any]]:
        """token -> every place its answer landed (once all are in, or after a while)."""

        async def collect() -> dict[str, list[Any]]:
            out: dict[str, list[Any]] = {t: [] for t in self.good}
            for sent in tg.sent:
                for t in TOKEN.findall(sent.text):
                    out.setdefault(t, []).append((sent.chat_id, None))
            for message in sl.bot_posts():
                for t in TOKEN.findall(message.text):
                    out.setdefault(t, []).append((message.channel, message.thread_ts))
            for post in mm.bot_posts():
                for t in TOKEN.findall(post["message"]):
                    out.setdefault(t, []).append((post["channel_id"], post["root_id"]))
            for platform, where in self.good.values():
                if platform != "web" or where is None:
                    continue
                response = await client.get(
                    f"{url}/web/api/channels/{WEB_CHANNEL}/threads/{where}/messages"
                )
                if response.status_code != 200:
                    continue
                for m in response.json()["messages"]:
                    if m["role"] == "assistant" and m["delivery"] == "sent":
                        for t in TOKEN.findall(m["content"]):
                            out.setdefault(t, []).append(where)
            return out

        deadline = time.monotonic() + 120
        while True:
            answers = await collect()
            if all(answers.get(t) for t in self.good) or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        await asyncio.sleep(2.0)  # a late duplicate would show by now
        return await collect()

    def _report(
        self,
        answers: dict[str, list[Any]],
        inbox: list[tuple[str, str, str, int]],
        healthy: bool,
        alive: bool,
        seconds: float,
        mm: Any,
    ) -> dict[str, Any]:
        per: dict[str, dict[str, Any]] = {}
        for platform in PLATFORMS:
            good = [t for t, (p, _) in self.good.items() if p == platform]
            statuses = self.statuses.get(platform, Counter())
            wrong = [
                t for t in good if len(answers.get(t, [])) == 1 and answers[t][0] != self.good[t][1]
            ]
            rejected = [(s, r, n) for p, s, r, n in inbox if p == platform]
            per[platform] = {
                "offered": self.count,
                "http_status": dict(sorted(statuses.items())),
                "server_errors": sum(n for s, n in statuses.items() if s >= 500),
                "connection_errors": len(self.errors.get(platform, [])),
                "error_examples": self.errors.get(platform, [])[:3],
                "inbox": {
                    status: sum(n for s, _, n in rejected if s == status)
                    for status in sorted({s for s, _, _ in rejected})
                },
                "dead_letter_reasons": Counter(
                    {r: n for s, r, n in rejected if s == "rejected"}
                ).most_common(6),
                "oversized_closed_early": self.closed_early.get(platform, 0),
                "good": len(good),
                "good_answered_once": sum(1 for t in good if len(answers.get(t, [])) == 1),
                "good_unanswered": sum(1 for t in good if not answers.get(t)),
                "good_duplicated": sum(1 for t in good if len(answers.get(t, [])) > 1),
                "good_misrouted": len(wrong),
            }
        per["mattermost"]["websocket_connections"] = mm.connections_total
        per["mattermost"]["oversized_frames"] = self.oversized_frames
        return {
            "count_per_platform": self.count,
            "seed": self.seed,
            "seconds": round(seconds, 1),
            "process_alive": alive,
            "healthz_ok": healthy,
            "platforms": per,
            "logs": str(self.logdir),
        }


async def _connected(mm: Any, within: float = 90.0) -> None:
    """Until the gateway's websocket is connected to the fake (polled: the fake has no event
    for it)."""
    deadline = time.monotonic() + within
    while mm.live_connections == 0 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


async def _inbox(dsn: str) -> list[tuple[str, str, str, int]]:
    """(platform, status, reason, count) over the inbox, reasons cut to their first words."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            """
            SELECT platform, status, left(coalesce(reason, ''), 60) AS reason, count(*) AS n
            FROM inbound_events GROUP BY 1, 2, 3 ORDER BY 4 DESC
            """
        )
    finally:
        await conn.close()
    return [(r["platform"], r["status"], r["reason"], int(r["n"])) for r in rows]


def failures(result: dict[str, Any]) -> list[str]:
    """What the run proves wrong (empty: clean)."""
    out = []
    if not result["process_alive"]:
        out.append("the gateway process died")
    if not result["healthz_ok"]:
        out.append("/healthz is not ok")
    for platform, r in result["platforms"].items():
        for key in (
            "server_errors",
            "connection_errors",
            "good_unanswered",
            "good_duplicated",
            "good_misrouted",
        ):
            if r[key]:
                out.append(f"{platform}: {key} = {r[key]}")
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"## Ingress fuzzing ({result['count_per_platform']} events per platform, seed "
        f"{result['seed']}, {result['seconds']:.0f} s)",
        "",
        "| platform | offered | 2xx | 4xx | 5xx | dropped | dead letters | good answered once "
        "| lost | duplicated | misrouted |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for platform, r in result["platforms"].items():
        status = r["http_status"]
        two = sum(n for s, n in status.items() if 200 <= s < 300)
        four = sum(n for s, n in status.items() if 400 <= s < 500)
        shown_2xx = "n/a (websocket)" if platform == "mattermost" else str(two)
        shown_4xx = "n/a" if platform == "mattermost" else str(four)
        lines.append(
            f"| {platform} | {r['offered']} | {shown_2xx} | {shown_4xx} | {r['server_errors']} "
            f"| {r['connection_errors']} | {r['inbox'].get('rejected', 0)} "
            f"| {r['good_answered_once']}/{r['good']} | {r['good_unanswered']} "
            f"| {r['good_duplicated']} | {r['good_misrouted']} |"
        )
    lines.append("")
    lines.append(
        f"Process alive at the end: {result['process_alive']}; /healthz ok: "
        f"{result['healthz_ok']}; Mattermost websocket connections: "
        f"{result['platforms']['mattermost']['websocket_connections']} (frames over its 1 MiB "
        f"limit: {result['platforms']['mattermost']['oversized_frames']}, each closing it "
        "with 1009)."
    )
    for platform, r in result["platforms"].items():
        lines.append(f"- {platform}: HTTP statuses {r['http_status']}; inbox {r['inbox']}")
    return "\n".join(lines)


async def run_fuzz(count: int, seed: int, dsn: str | None = None) -> dict[str, Any]:
    return await Fuzz(count=count, seed=seed, dsn=dsn).run()


def main(count: int, seed: int) -> int:
    result = asyncio.run(run_fuzz(count, seed))
    print(markdown(result))
    print(json.dumps(result, indent=2, default=str), file=sys.stderr)
    bad = failures(result)
    for line in bad:
        print(f"FAILED: {line}")
    return 1 if bad else 0
