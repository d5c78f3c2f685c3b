"""The fault campaign's real surfaces (``python -m benchmarks --only faults --platforms``).

The platform fakes of ``testsupport/fakes`` (real local servers driven by the gateway's real
client libraries) and the web chat, as their users would drive them:

- Telegram: long polling on the leader replica (python-telegram-bot), one topic per thread in
  private chats with topics; a message is the platform's as soon as it is sent;
- Slack: the Events API, signed, pushed to a live replica (the load balancer's job), retried
  by the fake every 0.5 s on a non-2xx as Slack does; a mention in a channel arrives twice
  (``app_mention`` and ``message``);
- Mattermost: the websocket on the leader replica; a post is the server's as soon as it is
  made, and posts made while the socket is down are found by reconciliation;
- Microsoft Teams: activities signed by the fake Bot Framework's OpenID issuer, pushed to a
  live replica and pushed again every 0.3 s until one answers 200, as Bot Framework retries;
  each thread is the reply chain of a channel post that mentions the bot;
- web chat: ``POST /web/api/channels/camp/messages`` on a live replica, retried on a 503.

Each thread's first message starts it (a topic, a root post, a root ts, a web thread); the
rest are replies in it. Where every answer landed is read back from the fakes (and the web
chat's thread API), so that "answered exactly once, in its own thread" is checked where a user
would see it."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

from testsupport.fakes import slack as slack_fake
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.teams import FakeTeams
from testsupport.fakes.telegram import FakeTelegram

#: ``ans LABEL: id,id`` (and `` LEAK``), as ``campaigns.faults.CampaignAgent`` answers
ANSWER = re.compile(r"ans (\S+): (\S*)( LEAK)?")
WEB_CHANNEL = "camp"


@dataclass
class _Thread:
    platform: str
    label: str
    #: where its answers must land: a platform-specific place
    place: tuple[Any, ...] | None = None
    #: what a reply in it needs: Telegram (chat, topic), Slack/Mattermost root, web root id
    chat: Any = None
    root: str | None = None


@dataclass
class PlatformSurfaces:
    rng: random.Random
    threads_per_platform: int = 50
    env: dict[str, str] = field(default_factory=dict)
    #: sends repeated under an idempotency key: not observable on these fakes
    resends: int = 0
    _tg: FakeTelegram | None = None
    _sl: FakeSlack | None = None
    _mm: FakeMattermost | None = None
    _tm: FakeTeams | None = None
    _threads: dict[str, _Thread] = field(default_factory=dict)
    #: (platform, place, text) -> monotonic time first seen; one entry per post
    _seen_at: dict[tuple[Any, ...], float] = field(default_factory=dict)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _web_answers: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    _web_poll: asyncio.Task[None] | None = None
    _live: Callable[[], Sequence[str]] = lambda: []
    _client: httpx.AsyncClient | None = None
    #: labels of web threads with an unanswered message (polled)
    web_waiting: set[str] = field(default_factory=set)

    async def start(self) -> None:
        # the fakes' servers log every connection a killed replica drops
        logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
        self._tg, self._sl, self._mm = FakeTelegram(), FakeSlack(), FakeMattermost()
        await self._tg.start()
        await self._sl.start()
        await self._mm.start()
        self._tm = FakeTeams()
        await self._tm.start()
        # Slack retries a non-2xx; here every 0.5 s for 30 s, so an outage is covered
        self._sl.http_retry_delays = (0.5,) * 60
        self._client = httpx.AsyncClient(timeout=10)
        self.env = {
            "TELEGRAM_BOT_TOKEN": self._tg.token,
            "TELEGRAM_API_BASE_URL": self._tg.base_url,
            "SLACK_BOT_TOKEN": slack_fake.BOT_TOKEN,
            "SLACK_SIGNING_SECRET": slack_fake.SIGNING_SECRET,
            "SLACK_API_BASE_URL": self._sl.api_url,
            "MATTERMOST_URL": self._mm.url,
            "MATTERMOST_TOKEN": str(self._mm.bot.token),
            **self._tm.env(),
        }
        # Telegram paces replies at about 1/s per chat: two topics per private chat
        users = [self._tg.user() for _ in range(max(self.threads_per_platform // 2, 1))]
        for n in range(self.threads_per_platform):
            label = f"tg{n}"
            chat = self._tg.private(users[n % len(users)], topics=True)
            topic = self._tg.create_topic(chat, label)
            self._threads[label] = _Thread("telegram", label, (chat.id, topic), chat=chat)
            self._threads[label].root = str(topic)
            label = f"sl{n}"
            channel = f"C0CAMP{n % 10}"
            if channel not in self._sl.channels:
                self._sl.add_channel(channel)
            self._threads[label] = _Thread("slack", label, chat=channel)
            label = f"mm{n}"
            self._threads[label] = _Thread("mattermost", label, chat=self._mm.town_square)
            label = f"tm{n}"
            self._threads[label] = _Thread("teams", label, chat=self._tm.channel)
            label = f"wb{n}"
            self._threads[label] = _Thread("web", label, chat=WEB_CHANNEL)

    def attach(self, live_urls: Callable[[], Sequence[str]]) -> None:
        """Where the replicas listen (asked again at every push: replicas die)."""
        self._live = live_urls
        self._point_slack()
        if self._web_poll is None:
            self._web_poll = asyncio.create_task(self._poll_web(), name="campaign-web-poll")

    def _point_slack(self) -> None:
        live = list(self._live())
        if live and self._sl is not None:
            self._sl.events_url = f"{self.rng.choice(live)}/slack/events"

    def labels(self) -> list[str]:
        return list(self._threads)

    def web_threads(self) -> list[str]:
        """The web chat threads started so far (their root ids, in channel ``WEB_CHANNEL``)."""
        return [t.root for t in self._threads.values() if t.platform == "web" and t.root]

    async def stop(self) -> None:
        if self._web_poll is not None:
            self._web_poll.cancel()
        if self._client is not None:
            await self._client.aclose()
        if self._tg is not None:
            await self._tg.stop()
        if self._sl is not None:
            await self._sl.stop()
        if self._mm is not None:
            await self._mm.close()
        if self._tm is not None:
            await self._tm.close()

    # --- the users ---------------------------------------------------------------------------

    async def offer(self, label: str, mid: str, text: str, *, duplicate: bool) -> bool:
        """One user message (or the platform delivering it again). True once the platform
        holds it durably (Telegram and Mattermost: at once; Slack: a 2xx from the gateway;
        web chat: a 200)."""
        thread = self._threads[label]
        if thread.platform == "telegram":
            return self._telegram(thread, mid, text, duplicate=duplicate)
        if thread.platform == "slack":
            return await self._slack(thread, text, duplicate=duplicate)
        if thread.platform == "mattermost":
            return await self._mattermost(thread, mid, text, duplicate=duplicate)
        if thread.platform == "teams":
            return await self._teams(thread, mid, text, duplicate=duplicate)
        return await self._web(thread, mid, text)

    #: Telegram update ids by message id, for redeliveries
    _updates: dict[str, int] = field(default_factory=dict)
    _mm_posts: dict[str, str] = field(default_factory=dict)
    #: Teams activities by message id, for redeliveries
    _tm_activities: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _telegram(self, thread: _Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        assert self._tg is not None
        if duplicate and mid in self._updates:
            self._tg.replay(self._updates[mid])  # Telegram redelivers the same update
            return True
        self._tg.user_says(thread.chat, text, topic=int(thread.root or 0))
        self._updates[mid] = int(self._tg.pending_update_ids()[-1])
        return True

    async def _slack(self, thread: _Thread, text: str, *, duplicate: bool) -> bool:
        assert self._sl is not None
        if duplicate:
            return True  # every mention in a channel already arrives twice (see the doc)
        self._point_slack()
        if thread.root is None:
            # the thread's first message is its root: replies wait until it exists
            async with self._locks.setdefault(thread.label, asyncio.Lock()):
                if thread.root is None:
                    posted = await self._sl.user_posts(
                        thread.chat, f"<@{self._sl.bot_user_id}> {text}"
                    )
                    thread.root = posted.ts
                    thread.place = (thread.chat, posted.ts)
                    return any(d.succeeded for d in posted.deliveries)
        posted = await self._sl.user_posts(
            thread.chat, f"<@{self._sl.bot_user_id}> {text}", thread_ts=thread.root
        )
        return any(d.succeeded for d in posted.deliveries)

    async def _mattermost(self, thread: _Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        assert self._mm is not None
        if duplicate and mid in self._mm_posts:
            await self._mm.replay_posted(self._mm_posts[mid])
            return True
        if thread.root is None:
            async with self._locks.setdefault(thread.label, asyncio.Lock()):
                if thread.root is None:
                    post = await self._mm.user_posts(thread.chat, text, mention_bot=True)
                    self._mm_posts[mid] = post["id"]
                    thread.root = post["id"]
                    thread.place = (thread.chat.id, post["id"])
                    return True
        post = await self._mm.user_posts(
            thread.chat, text, root_id=thread.root or "", mention_bot=True
        )
        self._mm_posts[mid] = post["id"]
        return True

    async def _teams(self, thread: _Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        assert self._tm is not None
        if duplicate and mid in self._tm_activities:
            return await self._push_teams(self._tm_activities[mid])
        if thread.root is None:
            async with self._locks.setdefault(thread.label, asyncio.Lock()):
                if thread.root is None:
                    activity = self._tm.user_message(thread.chat, text)
                    thread.root = str(activity["id"])
                    thread.place = (thread.chat.id, thread.root)
                    self._tm_activities[mid] = activity
                    return await self._push_teams(activity)
        activity = self._tm.user_message(thread.chat, text, thread=thread.root)
        self._tm_activities[mid] = activity
        return await self._push_teams(activity)

    async def _push_teams(self, activity: dict[str, Any]) -> bool:
        """Bot Framework pushes an activity until the bot answers 2xx (a 4xx is final)."""
        assert self._tm is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = list(self._live())
            if live:
                try:
                    answer = await self._tm.deliver(
                        activity, url=f"{self.rng.choice(live)}/teams/messages"
                    )
                except (aiohttp.ClientError, TimeoutError):
                    pass
                else:
                    if answer.status == 200:
                        return True
                    if 400 <= answer.status < 500:
                        return False
            await asyncio.sleep(0.3)
        return False

    async def _web(self, thread: _Thread, mid: str, text: str) -> bool:
        assert self._client is not None
        body: dict[str, Any] = {"text": text, "client_msg_id": mid}
        # as a browser sends it: JSON with escapes (a lone surrogate cannot be UTF-8)
        if thread.root is not None:
            body["thread_id"] = thread.root
        else:
            thread.root = mid
            thread.place = (mid,)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = list(self._live())
            if live:
                try:
                    response = await self._client.post(
                        f"{self.rng.choice(live)}/web/api/channels/{WEB_CHANNEL}/messages",
                        content=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json"},
                    )
                    if response.status_code == 200:
                        self.web_waiting.add(thread.label)
                        return True
                    if 400 <= response.status_code < 500:
                        return False  # refused for good (the web chat refuses NUL)
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.3)  # the browser's client retries
        return False

    # --- faults of their own ----------------------------------------------------------------

    def send_fault(self, kind: str) -> None:
        """Rate limits on sends: Telegram's flood control (429 with retry_after), Slack's
        ``ratelimited`` or the Bot Connector's 429 (with Retry-After), on the next few sends."""
        assert self._tg is not None and self._sl is not None and self._tm is not None
        if kind == "telegram_429":
            self._tg.flood_next("sendMessage", times=5, retry_after=1)
        elif kind == "teams_429":
            self._tm.rate_limit_next(5, retry_after=1)
        else:
            self._sl.fail_next("chat.postMessage", status=429, retry_after=1, times=5)

    def send_faults_pending(self) -> bool:
        """A rate-limit storm still has 429s no send has met."""
        assert self._tg is not None and self._sl is not None and self._tm is not None
        return bool(
            self._tg.pending_faults("sendMessage")
            or self._sl.pending_faults("chat.postMessage")
            or self._tm.pending_faults()
        )

    async def drop_mattermost_socket(self, offer: Callable[[str], Any]) -> None:
        """Server-initiated close without a close frame (1006), then posts made while the
        gateway is away: only reconciliation after the reconnect can find them."""
        assert self._mm is not None
        await self._mm.drop_connections(1006)
        for label in self.rng.sample([t for t in self._threads if t.startswith("mm")], 3):
            await offer(label)

    # --- what landed where ------------------------------------------------------------------

    async def _poll_web(self) -> None:
        assert self._client is not None
        while True:
            await asyncio.sleep(0.25)
            live = list(self._live())
            if not live:
                continue
            for label in list(self.web_waiting):
                root = self._threads[label].root
                try:
                    response = await self._client.get(
                        f"{live[0]}/web/api/channels/{WEB_CHANNEL}/threads/{root}/messages"
                    )
                except httpx.HTTPError:
                    continue
                if response.status_code != 200:
                    continue
                answers = [
                    m["content"]
                    for m in response.json()["messages"]
                    if m["role"] == "assistant" and m["delivery"] == "sent"
                ]
                known = self._web_answers.setdefault(label, [])
                for text in answers[len(known) :]:
                    known.append((text, time.monotonic()))

    def _posts(self) -> list[tuple[str, tuple[Any, ...], str]]:
        """(platform, place, text) of every post of the bot."""
        assert self._tg is not None and self._sl is not None and self._mm is not None
        assert self._tm is not None
        out: list[tuple[str, tuple[Any, ...], str]] = []
        out.extend(("telegram", (s.chat_id, s.topic), s.text) for s in self._tg.sent)
        out.extend(("slack", (m.channel, m.thread_ts), m.text) for m in self._sl.bot_posts())
        out.extend(
            ("mattermost", (p["channel_id"], p["root_id"]), p["message"])
            for p in self._mm.bot_posts()
        )
        out.extend(("teams", (m.place, m.root), m.text) for m in self._tm.bot_messages())
        for label, answers in self._web_answers.items():
            root = self._threads[label].root
            out.extend(("web", (root,), text) for text, _ in answers)
        return out

    def answered(self) -> dict[str, list[tuple[bool, bool]]]:
        """message id -> [(landed somewhere else than its thread, leak flag)] per answer."""
        out: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
        now = time.monotonic()
        for platform, place, text in self._posts():
            match = ANSWER.search(text)
            if match is None:
                continue
            self._seen_at.setdefault((platform, place, text), now)
            label = match.group(1)
            for mid in filter(None, match.group(2).split(",")):
                owner = self._threads.get(mid.split("-m")[0])
                misplaced = owner is None or owner.label != label or owner.place != place
                out[mid].append((misplaced, bool(match.group(3))))
        return out

    def last_answered(self, mids: set[str]) -> str:
        latest, which = 0.0, ""
        for (_, _, text), at in self._seen_at.items():
            match = ANSWER.search(text)
            if match and at > latest:
                hit = mids.intersection(match.group(2).split(","))
                if hit:
                    latest, which = at, sorted(hit)[0]
        return which

    def leaked(self) -> int:
        return sum(1 for _, _, text in self._posts() if text.rstrip().endswith(" LEAK"))

    def platform_of(self, mid: str) -> str:
        return self._threads[mid.split("-m")[0]].platform
