"""Per-surface drivers for contract tests that run the gateway in the test process
(``running_gateway``): the web chat, Telegram (polling or webhook), Slack's Events API,
Mattermost's websocket, Discord's gateway and Teams' Bot Framework activities. A driver
builds the surface's adapter, says something as a person in one place, and reads what the
bot answered to it (``testsupport.surfaces`` drives ``gateway run`` processes instead)."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx

from adapters.discord.adapter import DiscordAdapter
from adapters.matrix.adapter import MatrixAdapter, MatrixConfig
from adapters.mattermost.adapter import MattermostAdapter
from adapters.slack import SlackAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.runtime.gateway import Gateway
from testsupport.discord import make_config as discord_config
from testsupport.discord import session_up
from testsupport.fakes.discord import FakeDiscord
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import FakeSlack
from testsupport.fakes.teams import FakeTeams
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import wait_for
from testsupport.matrix import Person, synapse, texts_by, thread_of
from testsupport.mattermost import connected, make_config
from testsupport.slack import slack_settings
from testsupport.teams import teams_adapter
from testsupport.telegram import telegram_settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveSurface:
    """Base: no adapter (the web chat is built in), nothing to wait for."""

    #: the surface stores what a person typed even where PostgreSQL cannot (cleaned), or
    #: refuses it with a reason and keeps a dead letter (the web chat: a person sees the refusal)
    refuses_unstorable_text = False

    #: text PostgreSQL cannot store (a NUL, a lone surrogate), as a person on this surface
    #: can send it, and what the store keeps of it when it is cleaned
    poison = "bad\u0000text \ud800 here"
    cleaned = "badtext \ufffd here"

    def __init__(self, stack: AsyncExitStack) -> None:
        self.stack = stack
        self.settings: dict[str, Any] = {}

    async def start(self) -> None:
        pass

    def adapters(self) -> list[Any]:
        return []

    async def attached(self, gw: Gateway) -> None:
        pass

    def stored_form(self, text: str) -> str:
        """What the store keeps of a person's ``text`` on this surface."""
        return text

    async def say(self, text: str) -> Any:
        """Post ``text`` addressed to the bot; returns a handle for ``answers``."""
        raise NotImplementedError

    async def refresh(self, handle: Any) -> None:
        """Read what the bot answered so far (a fake records it without being asked)."""

    def answers(self, handle: Any) -> list[str]:
        raise NotImplementedError

    async def open_thread(self, text: str) -> Any:
        """Post ``text`` to the bot in a thread of its own (a new one each call, in one chat);
        ``answers`` reads that thread only."""
        return await self.say(text)

    def thread_form(self, text: str) -> str:
        """What the store keeps of ``text`` posted with ``open_thread``."""
        return self.stored_form(text)

    async def in_thread(self, handle: Any, text: str) -> None:
        """The person writes ``text`` (a command such as ``/stop`` too, addressed as the
        platform's clients address it) in the thread ``handle`` from ``open_thread``, before
        or after the bot answered there; ``answers(handle)`` lists the answers to it."""
        await self.follow_up(handle, text)

    def acknowledged(self, handle: Any) -> bool:
        """The platform got the success it needs for this message (no redelivery)."""
        return True

    def all_answers(self) -> list[str]:
        raise NotImplementedError

    # --- a person changes their mind: the question edited or deleted as the platform
    # delivers it, and a follow-up in the same thread ---------------------------------------

    #: why the person's deletions never reach the bot on this surface (None: they do)
    deletions_unseen: str | None = None

    async def edit(self, handle: Any, text: str) -> None:
        """The person edits the question ``handle`` (from ``say``) to ``text``; the store then
        reads ``stored_form(text)``."""
        raise NotImplementedError

    async def delete(self, handle: Any) -> None:
        """The person deletes the question ``handle``."""
        raise NotImplementedError

    async def follow_up(self, handle: Any, text: str) -> None:
        """The person asks ``text`` in the thread of ``handle``; ``answers(handle)`` then
        lists its answer after the first one's."""
        raise NotImplementedError


class WebSurface(LiveSurface):
    refuses_unstorable_text = True

    async def attached(self, gw: Gateway) -> None:
        self.client = await self.stack.enter_async_context(httpx.AsyncClient(base_url=gw.url))
        self.texts: dict[str, list[str]] = {}
        self.count = 0

    async def say(self, text: str) -> Any:
        self.count += 1
        msg_id = f"p{self.count}"
        body = {"text": text, "client_msg_id": msg_id}
        # the body exactly as typed (json= would refuse a lone surrogate before sending it)
        response = await self.client.post(
            "/web/api/channels/poison/messages",
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        return msg_id, response

    async def refresh(self, handle: Any) -> None:
        msg_id, _ = handle
        r = await self.client.get(f"/web/api/channels/poison/threads/{msg_id}/messages")
        self.texts[msg_id] = [
            m["content"] for m in r.json()["messages"] if m["role"] == "assistant"
        ]

    def answers(self, handle: Any) -> list[str]:
        return self.texts.get(handle[0], [])

    def all_answers(self) -> list[str]:
        return [t for texts in self.texts.values() for t in texts]

    def acknowledged(self, handle: Any) -> bool:
        return bool(handle[1].status_code == 200)

    def _message_url(self, handle: Any) -> str:
        msg_id, posted = handle
        seq = posted.json()["seq_no"]
        return f"/web/api/channels/poison/threads/{msg_id}/messages/{seq}"

    async def edit(self, handle: Any, text: str) -> None:
        changed = await self.client.patch(self._message_url(handle), json={"text": text})
        assert changed.status_code == 200, changed.text

    async def delete(self, handle: Any) -> None:
        gone = await self.client.delete(self._message_url(handle))
        assert gone.status_code == 200, gone.text

    async def follow_up(self, handle: Any, text: str) -> None:
        self.count += 1
        body = {"text": text, "client_msg_id": f"p{self.count}", "thread_id": handle[0]}
        posted = await self.client.post("/web/api/channels/poison/messages", json=body)
        assert posted.status_code == 200, posted.text


class TelegramSurface(LiveSurface):
    def __init__(self, stack: AsyncExitStack, mode: str) -> None:
        super().__init__(stack)
        self.mode = mode

    async def start(self) -> None:
        self.tg = await self.stack.enter_async_context(FakeTelegram())
        self.chat = self.tg.private(self.tg.user(first_name="Eve\u0000"))
        port = _free_port()
        self.settings = {"GATEWAY_HTTP_PORT": port}
        self.extra: dict[str, Any] = {}
        if self.mode == "webhook":
            self.extra = {
                "TELEGRAM_MODE": "webhook",
                "TELEGRAM_WEBHOOK_URL": f"http://127.0.0.1:{port}/telegram/webhook",
                "TELEGRAM_WEBHOOK_SECRET": "poison-secret",
            }

    def adapters(self) -> list[Any]:
        settings = telegram_settings(self.tg, **self.extra)
        return [TelegramAdapter(settings, poll_timeout=1, backoff_initial=0.05, pace=(0.01, 0.01))]

    #: the Bot API has no update for a deleted message
    deletions_unseen = "Telegram never tells a bot that a message was deleted"

    async def say(self, text: str) -> Any:
        return self.tg.user_says(self.chat, text)

    def _shown(self, sent: list[Any]) -> list[str]:
        """The bot's messages as the chat shows them: the newest edit's text, none deleted."""
        latest = {(chat, mid): text for chat, mid, text, _ in self.tg.edits}
        gone = set(self.tg.deleted)
        return [
            latest.get((s.chat_id, s.message_id), s.text)
            for s in sent
            if (s.chat_id, s.message_id) not in gone
        ]

    def answers(self, handle: Any) -> list[str]:
        if isinstance(handle, tuple):  # a topic of the forum (open_thread)
            return self._shown(self.tg.sent_to(handle[0], handle[1]))
        return self._shown(self.tg.sent_to(self.chat))  # a private chat: one place

    async def edit(self, handle: Any, text: str) -> None:
        self.tg.user_edits(self.chat, handle, text)  # an edited_message update

    async def follow_up(self, handle: Any, text: str) -> None:
        self.tg.user_says(self.chat, text)

    async def open_thread(self, text: str) -> Any:
        """A new topic of one forum, the bot mentioned (a group needs that to answer)."""
        if not hasattr(self, "forum"):
            self.forum = self.tg.forum()
        topic = self.tg.create_topic(self.forum, f"topic {len(self.forum.topics) + 1}")
        self.tg.user_says(self.forum, f"@{self.tg.bot.username} {text}", topic=topic)
        return self.forum, topic

    def thread_form(self, text: str) -> str:
        return f"@{self.tg.bot.username} {text}"  # a group's mention is kept

    async def in_thread(self, handle: Any, text: str) -> None:
        forum, topic = handle
        bot = self.tg.bot.username
        # a command as Telegram clients write it in a group: /stop@Bot
        said = f"{text}@{bot}" if text.startswith("/") else f"@{bot} {text}"
        self.tg.user_says(forum, said, topic=topic)

    def all_answers(self) -> list[str]:
        return [s.text for s in self.tg.sent]

    def acknowledged(self, handle: Any) -> bool:
        pushes_ok = all(status == 200 for _, status in self.tg.webhook_pushes)
        return self.tg.pending_update_ids() == [] and pushes_ok


class SlackSurface(LiveSurface):
    """Slack's Events API (``mode="events"``), or Socket Mode (``"socket"``): each through
    slack-bolt's app, Web API calls through slack_sdk's client."""

    def __init__(self, stack: AsyncExitStack, mode: str = "events") -> None:
        super().__init__(stack)
        self.mode = mode

    async def start(self) -> None:
        self.slack = await self.stack.enter_async_context(FakeSlack())
        self.slack.add_channel("C0GENERAL")

    def adapters(self) -> list[Any]:
        if self.mode == "socket":
            self.slack.mode = "socket"
            settings = slack_settings(
                self.slack, SLACK_APP_TOKEN=self.slack.app_token, SLACK_SIGNING_SECRET=None
            )
            return [SlackAdapter(settings)]
        return [SlackAdapter(slack_settings(self.slack))]

    async def attached(self, gw: Gateway) -> None:
        self.slack.events_url = f"{gw.url}slack/events"
        if self.mode == "socket":
            slack = self.slack
            await wait_for(lambda: slack.open_sockets(), timeout=20, message="the socket open")

    async def say(self, text: str) -> Any:
        return await self.slack.user_posts("C0GENERAL", f"<@U0BOT> {text}")

    def answers(self, handle: Any) -> list[str]:
        posts = self.slack.bot_posts("C0GENERAL")
        return [m.text for m in posts if m.thread_ts == handle.ts]

    def all_answers(self) -> list[str]:
        return [m.text for m in self.slack.bot_posts("C0GENERAL")]

    async def edit(self, handle: Any, text: str) -> None:
        # a signed message_changed event, as Slack sends it
        await self.slack.user_edits("C0GENERAL", handle.ts, f"<@U0BOT> {text}")

    async def delete(self, handle: Any) -> None:
        await self.slack.user_deletes("C0GENERAL", handle.ts)  # message_deleted

    async def follow_up(self, handle: Any, text: str) -> None:
        await self.slack.user_posts("C0GENERAL", f"<@U0BOT> {text}", thread_ts=handle.ts)

    def acknowledged(self, handle: Any) -> bool:
        return all(a.status == 200 for d in handle.deliveries for a in d.attempts)


class MattermostSurface(LiveSurface):
    async def start(self) -> None:
        self.mm = await self.stack.enter_async_context(FakeMattermost())

    def adapters(self) -> list[Any]:
        self.adapter = MattermostAdapter(make_config(self.mm))
        return [self.adapter]

    async def attached(self, gw: Gateway) -> None:
        await connected(self.adapter)

    def stored_form(self, text: str) -> str:
        return f"@gatewaybot {text}"

    async def say(self, text: str) -> Any:
        return await self.mm.user_posts(self.mm.town_square, text, mention_bot=True)

    def answers(self, handle: Any) -> list[str]:
        posts = self.mm.posts_in(self.mm.town_square, root_id=handle["id"], by=self.mm.bot)
        return [str(p["message"]) for p in posts]

    def all_answers(self) -> list[str]:
        return [str(p["message"]) for p in self.mm.bot_posts() if not p["delete_at"]]

    async def edit(self, handle: Any, text: str) -> None:
        await self.mm.edit_post(handle["id"], f"@gatewaybot {text}")  # post_edited

    async def delete(self, handle: Any) -> None:
        await self.mm.delete_post(handle["id"])  # post_deleted

    async def follow_up(self, handle: Any, text: str) -> None:
        await self.mm.user_posts(self.mm.town_square, text, root_id=handle["id"], mention_bot=True)


class DiscordSurface(LiveSurface):
    """A channel message mentioning the bot: answered in the thread started on it."""

    async def start(self) -> None:
        self.dc = await self.stack.enter_async_context(FakeDiscord())

    def adapters(self) -> list[Any]:
        self.adapter = DiscordAdapter(discord_config(self.dc))
        return [self.adapter]

    async def attached(self, gw: Gateway) -> None:
        await session_up(self.adapter, self.dc)

    def stored_form(self, text: str) -> str:
        return f"@{self.dc.bot.username} {text}"

    async def say(self, text: str) -> Any:
        return await self.dc.user_posts(self.dc.general, text, mention_bot=True)

    def answers(self, handle: Any) -> list[str]:
        return [str(m["content"]) for m in self.dc.in_channel(handle["id"], by=self.dc.bot)]

    def all_answers(self) -> list[str]:
        return [str(m["content"]) for m in self.dc.bot_messages()]

    async def edit(self, handle: Any, text: str) -> None:
        await self.dc.user_edits(handle, f"<@{self.dc.bot.id}> {text}")  # MESSAGE_UPDATE

    async def delete(self, handle: Any) -> None:
        await self.dc.user_deletes(handle)  # MESSAGE_DELETE

    async def follow_up(self, handle: Any, text: str) -> None:
        thread = self.dc.channels[handle["id"]]  # the thread started on the question
        await self.dc.user_posts(thread, text, mention_bot=True)

    async def in_thread(self, handle: Any, text: str) -> None:
        thread = self.dc.channels.get(handle["id"])
        if thread is None:
            # not answered yet: the person starts the thread on their question themselves
            thread = await self.dc.user_starts_thread(handle, "question")
        await self.dc.user_posts(thread, text, mention_bot=True)


class MatrixSurface(LiveSurface):
    """A room of three on a real Synapse homeserver (testsupport.matrix): each question
    mentions the bot at the room's top level, and its answer goes to the thread it roots."""

    # Synapse carries a NUL (JSON "\u0000") in a message's body, but answers 500 M_UNKNOWN
    # to a lone surrogate: the poison a homeserver passes on is NULs
    poison = "bad\u0000text \u0000here"
    cleaned = "badtext here"

    async def start(self) -> None:
        self.server = synapse()
        self.bot = self.server.register("bot")
        self.ann = Person(self.server, self.server.register("ann"))
        self.bob = Person(self.server, self.server.register("bob"))
        self.events: list[dict[str, Any]] = []

    def adapters(self) -> list[Any]:
        config = MatrixConfig(
            homeserver_url=self.server.url,
            access_token=self.bot.access_token,
            sync_timeout_ms=500,
            backoff_initial=0.05,
            # the test homeserver has no rate limits, like one that exempts its bot
            messages_per_second=100,
        )
        return [MatrixAdapter(config)]

    async def attached(self, gw: Gateway) -> None:
        self.room = await self.ann.create_room(invite=(self.bot.user_id, self.bob.user_id))
        await self.bob.join(self.room)

        async def joined() -> bool:
            return self.bot.user_id in await self.ann.joined(self.room)

        await wait_for(joined, timeout=30, interval=0.1, message="the bot joined")

    def stored_form(self, text: str) -> str:
        return f"{self.bot.user_id}: {text}"

    async def say(self, text: str) -> Any:
        return await self.ann.say(self.room, text, mention=self.bot.user_id)

    async def refresh(self, handle: Any) -> None:
        self.events = await self.ann.messages(self.room)

    def answers(self, handle: Any) -> list[str]:
        mine = texts_by(self.events, self.bot.user_id)
        return [str(m["text"]) for m in mine if thread_of(m) == handle]

    def all_answers(self) -> list[str]:
        return [str(m["text"]) for m in texts_by(self.events, self.bot.user_id)]

    async def edit(self, handle: Any, text: str) -> None:
        # an m.replace event whose new content keeps the mention
        await self.ann.edit(self.room, handle, f"{self.bot.user_id}: {text}")

    async def delete(self, handle: Any) -> None:
        await self.ann.redact(self.room, handle)

    async def follow_up(self, handle: Any, text: str) -> None:
        await self.ann.say(self.room, text, mention=self.bot.user_id, thread=handle)


class TeamsSurface(LiveSurface):
    """A 1:1 chat with the bot (``say``) and posts in a team channel that mention it, each the
    root of its own reply chain (``open_thread``), over the fake Bot Framework."""

    async def start(self) -> None:
        self.teams = await self.stack.enter_async_context(FakeTeams())
        self.chat = self.teams.personal_chat()

    def adapters(self) -> list[Any]:
        return [teams_adapter(self.teams)]

    async def attached(self, gw: Gateway) -> None:
        self.teams.messages_url = f"{gw.url}teams/messages"

    async def say(self, text: str) -> Any:
        return await self.teams.user_posts(self.chat, text, mention=False)

    async def open_thread(self, text: str) -> Any:
        return await self.teams.user_posts(self.teams.channel, text)

    def answers(self, handle: Any) -> list[str]:
        if handle.activity["conversation"]["conversationType"] == "channel":
            root = handle.activity["id"]
            return [m.text for m in self.teams.bot_messages(self.teams.channel, root=root)]
        return [m.text for m in self.teams.bot_messages(self.chat)]

    def all_answers(self) -> list[str]:
        return [m.text for m in self.teams.bot_messages()]

    async def edit(self, handle: Any, text: str) -> None:
        await self.teams.edits(handle.activity["id"], text)  # messageUpdate (editMessage)

    async def delete(self, handle: Any) -> None:
        await self.teams.deletes(handle.activity["id"])  # messageDelete (softDeleteMessage)

    async def follow_up(self, handle: Any, text: str) -> None:
        await self.teams.user_posts(self.chat, text, mention=False)  # the 1:1 chat: one place

    async def in_thread(self, handle: Any, text: str) -> None:
        # a reply in the channel post's chain, mentioning the bot
        root = handle.activity["id"]
        await self.teams.user_posts(self.teams.channel, text, thread=root)

    def acknowledged(self, handle: Any) -> bool:
        return bool(handle.status == 200)


#: every surface, and Telegram in both of its modes
NAMES = [
    "web",
    "telegram-polling",
    "telegram-webhook",
    "slack",
    "mattermost",
    "discord",
    "matrix",
    "teams",
]


@asynccontextmanager
async def live_surface(name: str) -> AsyncIterator[LiveSurface]:
    async with AsyncExitStack() as stack:
        driver: LiveSurface
        if name == "web":
            driver = WebSurface(stack)
        elif name.startswith("telegram-"):
            driver = TelegramSurface(stack, name.removeprefix("telegram-"))
        elif name.startswith("slack"):
            # "slack-socket": Socket Mode (not in NAMES: the Events API stands for Slack there)
            driver = SlackSurface(stack, "socket" if name == "slack-socket" else "events")
        elif name == "discord":
            driver = DiscordSurface(stack)
        elif name == "matrix":
            driver = MatrixSurface(stack)
        elif name == "teams":
            driver = TeamsSurface(stack)
        else:
            driver = MattermostSurface(stack)
        await driver.start()
        yield driver
