"""The fault campaign's real surfaces (``python -m benchmarks --only faults --platforms``).

Each surface is a driver in ``DRIVERS``: it starts its platform (a fake of
``testsupport/fakes``, a real local server driven by the gateway's real client library, or a
real homeserver), gives the gateway its settings, opens threads and replies in them as their
users would, and reads back where every answer of the bot landed:

- Telegram: long polling on the leader replica (python-telegram-bot), one topic per thread in
  private chats with topics; a message is the platform's as soon as it is sent;
- Slack: the Events API, signed, pushed to a live replica (the load balancer's job), retried
  by the fake every 0.5 s on a non-2xx as Slack does; a mention in a channel arrives twice
  (``app_mention`` and ``message``);
- Mattermost: the websocket on the leader replica; a post is the server's as soon as it is
  made, and posts made while the socket is down are found by reconciliation;
- web chat: ``POST /web/api/channels/camp/messages`` on a live replica, retried on a 503;
- Matrix: a real Synapse homeserver (``testsupport.matrix``, started once per process) synced
  by the leader replica; the bot joins the rooms it is invited to, a thread is rooted at a
  message mentioning it (``m.thread``), and answers are read from a person's own ``/sync``;
- Discord: the gateway WebSocket on the leader replica (hikari) and REST; a thread is the
  public thread the bot starts on a channel message that mentions it;
- Microsoft Teams: activities signed by the fake Bot Framework's OpenID issuer, pushed to a
  live replica and pushed again every 0.3 s until one answers 200, as Bot Framework retries;
  a thread is the reply chain of a channel post that mentions the bot.

Each thread's first message starts it (a topic, a root post, a root ts, a web thread, a root
event, a Discord thread, a reply chain); the rest are replies in it. Where every answer landed
is read back from the platform, so that "answered exactly once, in its own thread" is checked
where a user would see it. Adding a surface is one driver class and one row in ``DRIVERS``."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import httpx

from testsupport.fakes import slack as slack_fake
from testsupport.fakes.discord import FakeDiscord
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.teams import FakeTeams
from testsupport.fakes.telegram import FakeTelegram

#: ``ans LABEL: id,id`` (and `` LEAK``), as ``campaigns.faults.CampaignAgent`` answers
ANSWER = re.compile(r"ans (\S+): (\S*)( LEAK)?")
WEB_CHANNEL = "camp"

#: a bot's post: where it landed (a surface's own place) and its text
Post = tuple[tuple[Any, ...], str]


@dataclass
class Thread:
    """One campaign thread on one surface."""

    platform: str
    label: str
    #: where its answers must land: a surface's own place (compared with ``Driver.posts``)
    place: tuple[Any, ...] | None = None
    #: what a message in it needs: a chat, a channel, a room
    chat: Any = None
    #: its root (a topic, a root post or ts, a web thread, a root event): set by the first
    #: message, and replies wait for it
    root: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class Reach:
    """What every driver shares: the seeded randomness, where the live replicas listen (asked
    again at every push: replicas die) and an HTTP client."""

    rng: random.Random
    live: Callable[[], Sequence[str]] = lambda: []
    client: httpx.AsyncClient | None = None

    def http(self) -> httpx.AsyncClient:
        if self.client is None:
            raise RuntimeError("the surfaces are not started")
        return self.client


class Driver(Protocol):
    """One surface of the campaign. A driver names it as its one base and keeps the defaults
    of what its surface cannot do: no send faults, no connection drop, nothing to do once the
    replicas run."""

    #: the platform's name (the gateway's, and the report's rows)
    name: str
    #: its threads' label prefix (``tg`` -> ``tg0``, ``tg1``); letters only
    prefix: str
    #: the gateway's settings for it
    env: dict[str, str]
    #: the send faults it can inject (``send_fault``), by kind
    send_faults: tuple[str, ...] = ()
    #: the connection drop it can inject (``drop``), if any: the fault's kind
    drop_kind: str | None = None

    async def start(self, threads: list[Thread]) -> None:
        """Start the platform and lay out ``threads`` (their chats)."""

    def attached(self) -> None:
        """The replicas run (``Reach.live`` answers)."""
        return None

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        """One user message in ``thread`` (or the platform delivering it again). True once
        the platform holds it durably; False if refused for good."""

    def posts(self) -> Iterable[Post]:
        """Every post of the bot: (place, text)."""

    def send_fault(self, kind: str) -> None:
        """A storm of 429s on the next few sends (one of ``send_faults``)."""
        return None

    def send_faults_pending(self) -> bool:
        """The storm still has 429s no send has met."""
        return False

    async def drop(self) -> None:
        """Drop the gateway's connection (``drop_kind``)."""
        return None

    async def stop(self) -> None: ...


# --- the drivers -----------------------------------------------------------------------------


class TelegramDriver(Driver):
    name = "telegram"
    prefix = "tg"
    send_faults: tuple[str, ...] = ("telegram_429",)

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.fake = FakeTelegram()
        self.env: dict[str, str] = {}
        #: Telegram update ids by message id, for redeliveries
        self._updates: dict[str, int] = {}

    async def start(self, threads: list[Thread]) -> None:
        await self.fake.start()
        self.env = {
            "TELEGRAM_BOT_TOKEN": self.fake.token,
            "TELEGRAM_API_BASE_URL": self.fake.base_url,
        }
        # Telegram paces replies at about 1/s per chat: two topics per private chat
        users = [self.fake.user() for _ in range(max(len(threads) // 2, 1))]
        for n, thread in enumerate(threads):
            chat = self.fake.private(users[n % len(users)], topics=True)
            topic = self.fake.create_topic(chat, thread.label)
            thread.chat, thread.root, thread.place = chat, str(topic), (chat.id, topic)

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        if duplicate and mid in self._updates:
            self.fake.replay(self._updates[mid])  # Telegram redelivers the same update
            return True
        self.fake.user_says(thread.chat, text, topic=int(thread.root or 0))
        self._updates[mid] = int(self.fake.pending_update_ids()[-1])
        return True

    def posts(self) -> Iterable[Post]:
        return [((s.chat_id, s.topic), s.text) for s in self.fake.sent]

    def send_fault(self, kind: str) -> None:
        # flood control: 429 with retry_after on the next few sends
        self.fake.flood_next("sendMessage", times=5, retry_after=1)

    def send_faults_pending(self) -> bool:
        return bool(self.fake.pending_faults("sendMessage"))

    async def stop(self) -> None:
        await self.fake.stop()


class SlackDriver(Driver):
    name = "slack"
    prefix = "sl"
    send_faults: tuple[str, ...] = ("slack_429",)

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.fake = FakeSlack()
        self.env: dict[str, str] = {}

    async def start(self, threads: list[Thread]) -> None:
        await self.fake.start()
        # Slack retries a non-2xx; here every 0.5 s for 30 s, so an outage is covered
        self.fake.http_retry_delays = (0.5,) * 60
        self.env = {
            "SLACK_BOT_TOKEN": slack_fake.BOT_TOKEN,
            "SLACK_SIGNING_SECRET": slack_fake.SIGNING_SECRET,
            "SLACK_API_BASE_URL": self.fake.api_url,
        }
        for n, thread in enumerate(threads):
            thread.chat = f"C0CAMP{n % 10}"
            if thread.chat not in self.fake.channels:
                self.fake.add_channel(thread.chat)

    def attached(self) -> None:
        self._point()

    def _point(self) -> None:
        live = list(self.reach.live())
        if live:
            self.fake.events_url = f"{self.reach.rng.choice(live)}/slack/events"

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        if duplicate:
            return True  # every mention in a channel already arrives twice (see the doc)
        self._point()
        said = f"<@{self.fake.bot_user_id}> {text}"
        if thread.root is None:
            # the thread's first message is its root: replies wait until it exists
            async with thread.lock:
                if thread.root is None:
                    posted = await self.fake.user_posts(thread.chat, said)
                    thread.root, thread.place = posted.ts, (thread.chat, posted.ts)
                    return any(d.succeeded for d in posted.deliveries)
        posted = await self.fake.user_posts(thread.chat, said, thread_ts=thread.root)
        return any(d.succeeded for d in posted.deliveries)

    def posts(self) -> Iterable[Post]:
        return [((m.channel, m.thread_ts), m.text) for m in self.fake.bot_posts()]

    def send_fault(self, kind: str) -> None:
        # ``ratelimited``: 429 with Retry-After on the next few sends
        self.fake.fail_next("chat.postMessage", status=429, retry_after=1, times=5)

    def send_faults_pending(self) -> bool:
        return bool(self.fake.pending_faults("chat.postMessage"))

    async def stop(self) -> None:
        await self.fake.stop()


class MattermostDriver(Driver):
    name = "mattermost"
    prefix = "mm"
    drop_kind: str | None = "mattermost_socket_drop"

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.fake = FakeMattermost()
        self.env: dict[str, str] = {}
        self._posts: dict[str, str] = {}  # message id -> post id, for replays

    async def start(self, threads: list[Thread]) -> None:
        await self.fake.start()
        self.env = {"MATTERMOST_URL": self.fake.url, "MATTERMOST_TOKEN": str(self.fake.bot.token)}
        for thread in threads:
            thread.chat = self.fake.town_square

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        if duplicate and mid in self._posts:
            await self.fake.replay_posted(self._posts[mid])
            return True
        if thread.root is None:
            async with thread.lock:
                if thread.root is None:
                    post = await self.fake.user_posts(thread.chat, text, mention_bot=True)
                    self._posts[mid] = post["id"]
                    thread.root, thread.place = post["id"], (thread.chat.id, post["id"])
                    return True
        post = await self.fake.user_posts(
            thread.chat, text, root_id=thread.root or "", mention_bot=True
        )
        self._posts[mid] = post["id"]
        return True

    def posts(self) -> Iterable[Post]:
        return [((p["channel_id"], p["root_id"]), p["message"]) for p in self.fake.bot_posts()]

    async def drop(self) -> None:
        """Server-initiated close without a close frame (1006): posts made while the gateway
        is away are found only by reconciliation after the reconnect."""
        await self.fake.drop_connections(1006)

    async def stop(self) -> None:
        await self.fake.close()


class WebDriver(Driver):
    name = "web"
    prefix = "wb"

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.env: dict[str, str] = {}
        self.threads: dict[str, Thread] = {}
        #: labels of threads with an unanswered message (polled)
        self.waiting: set[str] = set()
        self._answers: dict[str, list[str]] = {}
        self._poll: asyncio.Task[None] | None = None

    async def start(self, threads: list[Thread]) -> None:
        for thread in threads:
            thread.chat = WEB_CHANNEL
            self.threads[thread.label] = thread

    def attached(self) -> None:
        if self._poll is None:
            self._poll = asyncio.create_task(self._read(), name="campaign-web-poll")

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        body: dict[str, Any] = {"text": text, "client_msg_id": mid}
        if thread.root is not None:
            body["thread_id"] = thread.root
        else:
            thread.root, thread.place = mid, (mid,)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = list(self.reach.live())
            if live:
                try:
                    # as a browser sends it: JSON with escapes (a lone surrogate cannot be UTF-8)
                    response = await self.reach.http().post(
                        f"{self.reach.rng.choice(live)}/web/api/channels/{WEB_CHANNEL}/messages",
                        content=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json"},
                    )
                    if response.status_code == 200:
                        self.waiting.add(thread.label)
                        return True
                    if 400 <= response.status_code < 500:
                        return False  # refused for good (the web chat refuses NUL)
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.3)  # the browser's client retries
        return False

    async def _read(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            live = list(self.reach.live())
            if not live:
                continue
            for label in list(self.waiting):
                root = self.threads[label].root
                try:
                    response = await self.reach.http().get(
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
                known = self._answers.setdefault(label, [])
                known.extend(answers[len(known) :])

    def posts(self) -> Iterable[Post]:
        return [
            ((self.threads[label].root,), text)
            for label, answers in self._answers.items()
            for text in answers
        ]

    async def stop(self) -> None:
        if self._poll is not None:
            self._poll.cancel()
            await asyncio.gather(self._poll, return_exceptions=True)


class MatrixDriver(Driver):
    """A real Synapse (``testsupport.matrix``: one per process, started on first use). Ann
    invites the bot and Bob to a few rooms of three; the bot joins them on its first sync.
    A thread is rooted at Ann's message mentioning the bot; its replies are ``m.thread``
    events under that root. Ann's own ``/sync`` reads where the bot's answers landed:
    (room, thread root), the root ``None`` for one at the room's top level."""

    name = "matrix"
    prefix = "mx"
    #: rooms the threads are spread over (each a room of three: not a direct chat)
    ROOMS = 4

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.env: dict[str, str] = {}
        self._rooms: list[str] = []
        self._joined: set[str] = set()
        self._room_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        #: the transaction id and content of each message, for the client's retry
        self._txns: dict[str, tuple[str, dict[str, Any]]] = {}
        #: the bot's messages by event id: [place, text] (an edit replaces the text)
        self._bot_events: dict[str, list[Any]] = {}
        self._edits: dict[str, str] = {}
        self._since: str | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, threads: list[Thread]) -> None:
        from testsupport.matrix import Person, synapse

        server = await asyncio.to_thread(synapse)
        self.server = server
        self.bot = await asyncio.to_thread(server.register, "campbot")
        self.ann = Person(server, await asyncio.to_thread(server.register, "campann"))
        bob = Person(server, await asyncio.to_thread(server.register, "campbob"))
        self.env = {
            "MATRIX_HOMESERVER_URL": server.url,
            "MATRIX_ACCESS_TOKEN": self.bot.access_token,
            "MATRIX_MESSAGES_PER_SECOND": "100",  # no limits on the test homeserver
        }
        for _ in range(min(self.ROOMS, max(len(threads), 1))):
            room = await self.ann.create_room(invite=(self.bot.user_id, bob.user_id))
            await bob.join(room)
            self._rooms.append(room)
        for n, thread in enumerate(threads):
            thread.chat = self._rooms[n % len(self._rooms)]
        # where Ann's reading starts: before the gateway says anything
        await self._sync(timeout_ms=0)
        self._reader = asyncio.create_task(self._read(), name="campaign-matrix-sync")

    async def _until_joined(self, room: str) -> None:
        """The bot joins when the leader's first sync sees the invite; before that, a message
        is history it never answers (as for a person who writes before the bot is there)."""
        if room in self._joined:
            return
        async with self._room_locks[room]:
            deadline = time.monotonic() + 120
            while room not in self._joined and time.monotonic() < deadline:
                if self.bot.user_id in await self.ann.joined(room):
                    self._joined.add(room)
                    return
                await asyncio.sleep(0.2)

    async def _put(self, room: str, txn: str, content: dict[str, Any]) -> tuple[int, Any]:
        """Ann's client sends: (status, body); a 5xx or no answer is retried under the same
        transaction id, as a client does (the homeserver keeps one event per id)."""
        quoted = urllib.parse.quote(room, safe="")
        deadline = time.monotonic() + 60
        while True:
            try:
                # JSON with escapes, as a client sends it: the homeserver judges a lone
                # surrogate or a NUL
                answer = await self.reach.http().put(
                    f"{self.server.url}/_matrix/client/v3/rooms/{quoted}/send/m.room.message/{txn}",
                    content=json.dumps(content).encode(),
                    headers={
                        "Authorization": f"Bearer {self.ann.account.access_token}",
                        "Content-Type": "application/json",
                    },
                )
                if answer.status_code < 500 or time.monotonic() > deadline:
                    return answer.status_code, answer.json()
            except (httpx.HTTPError, ValueError):
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.3)

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        room = str(thread.chat)
        if duplicate:
            # Ann's client sends again under the same transaction id (a lost response): the
            # homeserver keeps one event; the gateway's redeliveries are the sync batches a
            # SIGKILL kept it from recording, read again by the next leader
            sent = self._txns.get(mid)
            if sent is None:
                return True
            return (await self._put(room, *sent))[0] < 300
        await self._until_joined(room)
        txn = f"camp-{mid}"
        if thread.root is None:
            async with thread.lock:
                if thread.root is None:
                    self._txns[mid] = (txn, self._content(thread, text))
                    status, body = await self._put(room, *self._txns[mid])
                    if status >= 300:
                        return False
                    thread.root = str(body["event_id"])
                    thread.place = (room, thread.root)
                    return True
        self._txns[mid] = (txn, self._content(thread, text))
        return (await self._put(room, *self._txns[mid]))[0] < 300

    def _content(self, thread: Thread, text: str) -> dict[str, Any]:
        bot = self.bot.user_id
        content: dict[str, Any] = {
            "msgtype": "m.text",
            "body": f"{bot}: {text}",
            "m.mentions": {"user_ids": [bot]},
        }
        if thread.root is not None:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": thread.root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": thread.root},
            }
        return content

    async def _sync(self, timeout_ms: int) -> None:
        params = {
            "timeout": str(timeout_ms),
            "filter": json.dumps(
                {
                    "room": {"timeline": {"limit": 1000, "types": ["m.room.message"]}},
                    "presence": {"types": []},
                    "account_data": {"types": []},
                }
            ),
        }
        if self._since:
            params["since"] = self._since
        answer = await self.reach.http().get(
            f"{self.server.url}/_matrix/client/v3/sync",
            params=params,
            headers={"Authorization": f"Bearer {self.ann.account.access_token}"},
            timeout=timeout_ms / 1000 + 30,
        )
        answer.raise_for_status()
        batch = answer.json()
        if self._since is not None:
            for room, data in batch.get("rooms", {}).get("join", {}).items():
                for event in data.get("timeline", {}).get("events", []):
                    self._seen(room, event)
        self._since = batch["next_batch"]

    def _seen(self, room: str, event: dict[str, Any]) -> None:
        if event.get("sender") != self.bot.user_id:
            return
        content = event.get("content") or {}
        relation = content.get("m.relates_to") or {}
        if relation.get("rel_type") == "m.replace":
            new = content.get("m.new_content") or {}
            self._edits[str(relation.get("event_id"))] = str(new.get("body", ""))
            return
        root = relation.get("event_id") if relation.get("rel_type") == "m.thread" else None
        self._bot_events[event["event_id"]] = [(room, root), str(content.get("body", ""))]

    async def _read(self) -> None:
        while True:
            try:
                await self._sync(timeout_ms=2000)
            except (httpx.HTTPError, KeyError, ValueError):
                await asyncio.sleep(0.5)

    def posts(self) -> Iterable[Post]:
        return [
            (place, self._edits.get(event_id, text))
            for event_id, (place, text) in self._bot_events.items()
        ]

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)


class DiscordDriver(Driver):
    """The fake Discord (``testsupport.fakes.discord``: REST and the gateway WebSocket,
    driven by hikari on the leader replica). A thread is the public thread the bot starts on
    a channel message that mentions it (its id is the message's); replies are posted in it
    once it exists (after a minute, the person starts it, as a person can). A redelivery is
    the same ``MESSAGE_CREATE`` dispatched again; the connection drop cuts the socket without
    a close frame (the session stays resumable)."""

    name = "discord"
    prefix = "dc"
    send_faults: tuple[str, ...] = ("discord_429",)
    drop_kind: str | None = "discord_gateway_drop"

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.fake = FakeDiscord()
        self.env: dict[str, str] = {}
        self._messages: dict[str, dict[str, Any]] = {}
        self._limited = 0

    async def start(self, threads: list[Thread]) -> None:
        await self.fake.start()
        self.env = {"DISCORD_BOT_TOKEN": self.fake.token, "DISCORD_API_BASE_URL": self.fake.api_url}
        for thread in threads:
            thread.chat = self.fake.general

    async def _connected(self) -> None:
        """Before the gateway's first session, a message reaches no one (the catch-up after a
        gap is the adapter's; the time before it ever connected is not)."""
        for _ in range(1200):  # two minutes
            if self.fake.live:
                return
            await asyncio.sleep(0.1)

    async def _thread_of(self, thread: Thread) -> Any:
        root = str(thread.root)
        for _ in range(600):  # a minute
            if root in self.fake.channels:
                break
            await asyncio.sleep(0.1)
        else:
            await self.fake.user_starts_thread(self.fake.messages[root], thread.label)
        return self.fake.channels[root]

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        if duplicate:
            message = self._messages.get(mid)
            if message is not None:
                await self.fake.dispatch("MESSAGE_CREATE", dict(message))
            return True
        await self._connected()
        if thread.root is None:
            async with thread.lock:
                if thread.root is None:
                    message = await self.fake.user_posts(thread.chat, text, mention_bot=True)
                    self._messages[mid] = message
                    thread.root = str(message["id"])
                    thread.place = (thread.root,)  # the thread's channel id is the root's
                    return True
        channel = await self._thread_of(thread)
        self._messages[mid] = await self.fake.user_posts(channel, text, mention_bot=True)
        return True

    def posts(self) -> Iterable[Post]:
        return [((m["channel_id"],), str(m["content"])) for m in self.fake.bot_messages()]

    def send_fault(self, kind: str) -> None:
        # 429s with retry_after on the next few message sends (the route's bucket)
        for _ in range(5):
            self.fake.rate_limit_next("POST", "/messages", 1.0)
        self._limited = len(self.fake.limited) + 5

    def send_faults_pending(self) -> bool:
        return len(self.fake.limited) < self._limited

    async def drop(self) -> None:
        self.fake.drop()

    async def stop(self) -> None:
        await self.fake.close()


class TeamsDriver(Driver):
    """The fake Bot Framework (``testsupport.fakes.teams``: connector, token endpoint and
    an OpenID issuer signing every activity). A thread is the reply chain under a channel
    post that mentions the bot; activities are pushed to a live replica's
    ``/teams/messages`` and pushed again every 0.3 s until one answers 200, as Bot Framework
    retries (a 4xx is final). A redelivery is the same activity (same id) again."""

    name = "teams"
    prefix = "tm"
    send_faults: tuple[str, ...] = ("teams_429",)

    def __init__(self, reach: Reach) -> None:
        self.reach = reach
        self.fake = FakeTeams()
        self.env: dict[str, str] = {}
        self._activities: dict[str, dict[str, Any]] = {}

    async def start(self, threads: list[Thread]) -> None:
        await self.fake.start()
        self.env = self.fake.env()
        for thread in threads:
            thread.chat = self.fake.channel

    async def _deliver(self, activity: dict[str, Any]) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = list(self.reach.live())
            if live:
                url = f"{self.reach.rng.choice(live)}/teams/messages"
                try:
                    answer = await self.fake.deliver(activity, url=url)
                except (aiohttp.ClientError, TimeoutError):
                    pass
                else:
                    if answer.status == 200:
                        return True
                    if 400 <= answer.status < 500:
                        return False  # refused for good
            await asyncio.sleep(0.3)
        return False

    async def offer(self, thread: Thread, mid: str, text: str, *, duplicate: bool) -> bool:
        if duplicate:
            activity = self._activities.get(mid)
            return True if activity is None else await self._deliver(activity)
        if thread.root is None:
            async with thread.lock:
                if thread.root is None:
                    activity = self.fake.user_message(thread.chat, text)
                    self._activities[mid] = activity
                    accepted = await self._deliver(activity)
                    thread.root = str(activity["id"])
                    thread.place = (thread.chat.id, thread.root)
                    return accepted
        activity = self.fake.user_message(thread.chat, text, thread=thread.root)
        self._activities[mid] = activity
        return await self._deliver(activity)

    def posts(self) -> Iterable[Post]:
        return [((m.place, m.root), m.text) for m in self.fake.bot_messages()]

    def send_fault(self, kind: str) -> None:
        self.fake.rate_limit_next(5, retry_after=1)

    def send_faults_pending(self) -> bool:
        return self.fake.pending_faults() > 0

    async def stop(self) -> None:
        await self.fake.close()


#: every surface the campaign drives, in the order of its reports
DRIVERS: dict[str, Callable[[Reach], Driver]] = {
    "telegram": TelegramDriver,
    "slack": SlackDriver,
    "mattermost": MattermostDriver,
    "web": WebDriver,
    "matrix": MatrixDriver,
    "discord": DiscordDriver,
    "teams": TeamsDriver,
}


# --- the surfaces together -------------------------------------------------------------------


@dataclass
class PlatformSurfaces:
    rng: random.Random
    threads_per_platform: int = 50
    #: the drivers (names in ``DRIVERS``); all by default
    surfaces: Sequence[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: sends repeated under an idempotency key: not observable on these platforms
    resends: int = 0
    drivers: dict[str, Driver] = field(default_factory=dict)
    _reach: Reach | None = None
    _threads: dict[str, Thread] = field(default_factory=dict)
    #: (platform, place, text) -> monotonic time first seen; one entry per post
    _seen_at: dict[tuple[Any, ...], float] = field(default_factory=dict)

    async def start(self) -> None:
        # the fakes' servers log every connection a killed replica drops
        logging.getLogger("aiohttp").setLevel(logging.CRITICAL)
        self._reach = Reach(self.rng, client=httpx.AsyncClient(timeout=10))
        for name in self.surfaces or list(DRIVERS):
            driver = DRIVERS[name](self._reach)
            threads = [
                Thread(name, f"{driver.prefix}{n}") for n in range(self.threads_per_platform)
            ]
            self.drivers[name] = driver
            await driver.start(threads)
            self._threads.update((t.label, t) for t in threads)
            self.env.update(driver.env)

    def attach(self, live_urls: Callable[[], Sequence[str]]) -> None:
        """Where the replicas listen (asked again at every push: replicas die)."""
        assert self._reach is not None
        self._reach.live = live_urls
        for driver in self.drivers.values():
            driver.attached()

    def labels(self) -> list[str]:
        return list(self._threads)

    def web_threads(self) -> list[str]:
        """The web chat threads started so far (their root ids, in channel ``WEB_CHANNEL``)."""
        return [t.root for t in self._threads.values() if t.platform == "web" and t.root]

    async def stop(self) -> None:
        for driver in self.drivers.values():
            try:
                await driver.stop()
            except Exception as exc:  # noqa: BLE001 - the others are stopped all the same
                logging.getLogger(__name__).warning("stopping %s: %r", driver.name, exc)
        if self._reach is not None and self._reach.client is not None:
            await self._reach.client.aclose()

    # --- the users ---------------------------------------------------------------------------

    async def offer(self, label: str, mid: str, text: str, *, duplicate: bool) -> bool:
        """One user message (or the platform delivering it again). True once the platform
        holds it durably (Telegram, Mattermost, Matrix: once posted; Slack: a 2xx from the
        gateway; web chat: a 200)."""
        thread = self._threads[label]
        return await self.drivers[thread.platform].offer(thread, mid, text, duplicate=duplicate)

    # --- faults of their own ----------------------------------------------------------------

    def send_fault_kinds(self) -> list[str]:
        """Rate limits on sends the surfaces can script (Telegram's flood control, Slack's
        ``ratelimited``, ...)."""
        return [kind for d in self.drivers.values() for kind in d.send_faults]

    def send_fault(self, kind: str) -> None:
        """A storm of 429s with a retry-after on the next few sends of one surface."""
        for driver in self.drivers.values():
            if kind in driver.send_faults:
                driver.send_fault(kind)

    def send_faults_pending(self) -> bool:
        """A rate-limit storm still has 429s no send has met."""
        return any(d.send_faults_pending() for d in self.drivers.values())

    def drop_kinds(self) -> list[str]:
        """The connection drops the surfaces can inject (the Mattermost websocket's, ...)."""
        return [d.drop_kind for d in self.drivers.values() if d.drop_kind]

    async def drop_connection(self, kind: str, offer: Callable[[str], Any]) -> None:
        """Drop a surface's connection, then post on it while the gateway is away: only
        reconciliation (or a resume) after the reconnect can find those posts."""
        driver = next(d for d in self.drivers.values() if d.drop_kind == kind)
        await driver.drop()
        mine = [t for t, thread in self._threads.items() if thread.platform == driver.name]
        for label in self.rng.sample(mine, min(3, len(mine))):
            await offer(label)

    # --- what landed where ------------------------------------------------------------------

    def _posts(self) -> list[tuple[str, tuple[Any, ...], str]]:
        """(platform, place, text) of every post of the bot."""
        return [
            (name, place, text)
            for name, driver in self.drivers.items()
            for place, text in driver.posts()
        ]

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
                misplaced = (
                    owner is None
                    or owner.label != label
                    or owner.platform != platform
                    or owner.place != place
                )
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
