"""One driver per surface for the contract suite (tests/contract): it starts the surface's fake,
gives a gateway what it needs to reach it, posts a message addressed to the bot into a new
thread, and reads back what the fake received from the bot, in that thread and anywhere else.

The contract tests speak only this small interface, so a promise every surface keeps is
written once; what a surface does differently (Telegram overflows a long answer into a second
message, Slack answers a threaded event, Mattermost needs its websocket up) lives here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, SIGNING_SECRET, FakeSlack
from testsupport.fakes.telegram import Chat, FakeTelegram
from testsupport.harness import wait_for
from testsupport.process import GatewayProcess

TELEGRAM_BOT = "@GatewayTestBot"
SLACK_CHANNEL = "C0GEN"


@dataclass(frozen=True)
class BotMessage:
    """One message of the bot as the platform shows it."""

    id: str
    text: str


@dataclass
class Surface:
    """The common part: a started fake and the thread of the last question."""

    name: str
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)

    #: how long a streamed answer must be to be mid-stream when the process is killed, and how
    #: many platform messages it spans by then (a second one only where a message overflows)
    slow_words: int = 300
    slow_chunk: tuple[int, float] = (8, 0.2)
    previews: int = 1

    async def start(self) -> None:
        raise NotImplementedError

    def process_env(self) -> dict[str, str]:
        """The settings a ``gateway run`` needs to reach this surface's fake."""
        raise NotImplementedError

    async def attached(self, gw: GatewayProcess) -> None:
        """Wait until a started gateway process receives from this surface."""

    async def ask(self, text: str) -> None:
        """Post ``text``, addressed to the bot, as the first message of a new thread."""
        raise NotImplementedError

    def in_thread(self) -> list[BotMessage]:
        """The bot's messages in the thread of the last ``ask``, oldest first."""
        raise NotImplementedError

    def anywhere(self) -> list[BotMessage]:
        """Every message of the bot on the whole fake platform."""
        raise NotImplementedError

    def edited(self) -> bool:
        raise NotImplementedError

    def edits_stay_in_thread(self) -> bool:
        raise NotImplementedError

    def sends(self) -> int:
        """New messages the bot sent into the thread (edits and deletions not counted)."""
        raise NotImplementedError

    def deleted(self) -> list[str]:
        raise NotImplementedError


class TelegramSurface(Surface):
    """A forum topic (with a second topic nothing may land in)."""

    slow_words = 950  # about 7,400 characters: two Telegram messages
    slow_chunk = (75, 0.25)
    previews = 2

    async def start(self) -> None:
        self.tg = await self.stack.enter_async_context(FakeTelegram())
        self.forum: Chat = self.tg.forum("Team")
        self.other = self.tg.create_topic(self.forum, "Other")
        self.topic: int | None = None

    def process_env(self) -> dict[str, str]:
        return {"TELEGRAM_BOT_TOKEN": self.tg.token, "TELEGRAM_API_BASE_URL": self.tg.base_url}

    async def ask(self, text: str) -> None:
        self.topic = self.tg.create_topic(self.forum, "Questions")
        self.tg.user_says(self.forum, f"{TELEGRAM_BOT} {text}", topic=self.topic)

    def _bot(self, topic: int | None) -> list[BotMessage]:
        return [
            BotMessage(str(m["message_id"]), str(m.get("text", "")))
            for m in self.tg.messages_in(self.forum, topic)
            if (m.get("from") or {}).get("id") == self.tg.bot.id
        ]

    def in_thread(self) -> list[BotMessage]:
        return self._bot(self.topic)

    def anywhere(self) -> list[BotMessage]:
        return [m for topic in (self.topic, self.other, None) for m in self._bot(topic)]

    def edited(self) -> bool:
        return bool(self.tg.edits)

    def edits_stay_in_thread(self) -> bool:
        ids = {int(m.id) for m in self.in_thread()} | {int(d) for d in self.deleted()}
        return all(chat == self.forum.id and mid in ids for chat, mid, _, _ in self.tg.edits)

    def sends(self) -> int:
        return len(self.tg.sent_to(self.forum, self.topic))

    def deleted(self) -> list[str]:
        return [str(mid) for chat, mid in self.tg.deleted if chat == self.forum.id]


class SlackSurface(Surface):
    """A channel thread over the Events API."""

    async def start(self) -> None:
        self.slack = await self.stack.enter_async_context(FakeSlack())
        self.slack.add_channel(SLACK_CHANNEL, members=(HUMAN,))
        self.root = ""

    def process_env(self) -> dict[str, str]:
        return {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_BASE_URL": self.slack.api_url,
        }

    async def attached(self, gw: GatewayProcess) -> None:
        self.slack.events_url = f"{gw.url.rstrip('/')}/slack/events"

    async def ask(self, text: str) -> None:
        posted = await self.slack.user_posts(SLACK_CHANNEL, f"<@{self.slack.bot_user_id}> {text}")
        self.root = posted.ts

    def anywhere(self) -> list[BotMessage]:
        return [BotMessage(m.ts, m.text) for m in self.slack.bot_posts()]

    def in_thread(self) -> list[BotMessage]:
        posts = self.slack.bot_posts(SLACK_CHANNEL)
        return [BotMessage(m.ts, m.text) for m in posts if m.thread_ts == self.root]

    def edited(self) -> bool:
        return bool(self.slack.updates)

    def edits_stay_in_thread(self) -> bool:
        return all(u[0] == SLACK_CHANNEL and u[2] == self.root for u in self.slack.updates)

    def sends(self) -> int:
        return len(self.slack.calls_to("chat.postMessage"))

    def deleted(self) -> list[str]:
        return [ts for _, ts in self.slack.deleted]


class MattermostSurface(Surface):
    """A thread under a root post in Town Square, over the websocket."""

    async def start(self) -> None:
        self.mm = await self.stack.enter_async_context(FakeMattermost())
        self.root = ""

    def process_env(self) -> dict[str, str]:
        return {"MATTERMOST_URL": self.mm.url, "MATTERMOST_TOKEN": str(self.mm.bot.token)}

    async def attached(self, gw: GatewayProcess) -> None:
        await wait_for(lambda: self.mm.live_connections > 0, timeout=30)

    async def ask(self, text: str) -> None:
        post = await self.mm.user_posts(self.mm.town_square, text, mention_bot=True)
        self.root = str(post["id"])

    def in_thread(self) -> list[BotMessage]:
        posts = self.mm.posts_in(self.mm.town_square, root_id=self.root, by=self.mm.bot)
        return [BotMessage(str(p["id"]), str(p["message"])) for p in posts]

    def anywhere(self) -> list[BotMessage]:
        posts: list[dict[str, Any]] = list(self.mm.posts.values())
        bot = [p for p in posts if p["user_id"] == self.mm.bot.id]
        return [BotMessage(str(p["id"]), str(p["message"])) for p in bot]

    def edited(self) -> bool:
        return bool(self.mm.edits)

    def edits_stay_in_thread(self) -> bool:
        return all(e[2] == self.root for e in self.mm.edits)

    def sends(self) -> int:
        return len(self.anywhere()) + len(self.mm.deleted)

    def deleted(self) -> list[str]:
        return list(self.mm.deleted)


SURFACES: dict[str, type[Surface]] = {
    "telegram": TelegramSurface,
    "slack": SlackSurface,
    "mattermost": MattermostSurface,
}


@asynccontextmanager
async def surface(name: str) -> AsyncIterator[Surface]:
    """A started surface's fake, stopped on the way out."""
    driver = SURFACES[name](name)
    async with driver.stack:
        await driver.start()
        yield driver
