"""One driver per surface for the contract suite (tests/contract): it starts the surface's fake,
gives a gateway what it needs to reach it, posts a message addressed to the bot into a new
thread, and reads back what the fake received from the bot, in that thread and anywhere else.
For approvals it finds the card in that thread and presses its buttons the way the platform
delivers a press (an update, a signed interaction, a relayed action, the web chat's POST).

The contract tests speak only this small interface, so a promise every surface keeps is
written once; what a surface does differently (Telegram overflows a long answer into a second
message, Slack answers a threaded event, Mattermost needs its websocket up) lives here."""

from __future__ import annotations

import copy
import dataclasses
import json
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapters.matrix.transport import APPROVE_TEXT as MATRIX_APPROVE
from adapters.matrix.transport import DENY_TEXT as MATRIX_DENY
from adapters.mattermost.actions import APPROVE as MM_APPROVE
from adapters.mattermost.actions import DENY as MM_DENY
from adapters.slack.transport import APPROVE_ACTION, DENY_ACTION
from testsupport.discord import discord_env
from testsupport.fakes.discord import FakeDiscord
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, SIGNING_SECRET, FakeSlack
from testsupport.fakes.teams import ANN, BOB, FakeTeams, Message
from testsupport.fakes.teams import BOT_NAME as TEAMS_BOT
from testsupport.fakes.telegram import Chat, FakeTelegram
from testsupport.harness import wait_for
from testsupport.matrix import Person, read_room, redacted, synapse, texts_by, thread_of
from testsupport.process import GatewayProcess

TELEGRAM_BOT = "@GatewayTestBot"
SLACK_CHANNEL = "C0GEN"
#: a second person in the Slack channel (presses a card that is not theirs)
OTHER_HUMAN = "U0OTHER"


@dataclass(frozen=True)
class BotMessage:
    """One message of the bot as the platform shows it."""

    id: str
    text: str


@dataclass(frozen=True)
class Card:
    """An approval card in the thread: its platform message id, and the card as the platform
    showed it when it arrived (what a later press of its buttons carries)."""

    id: str
    shown: Any


@dataclass(frozen=True)
class Press:
    """How a card's button is pressed: Approve (else Deny), by the person who asked (else
    someone else in the chat), on the card (else the same button on a message in another
    thread of the chat)."""

    approve: bool = True
    other_person: bool = False
    other_thread: bool = False


#: the asker presses Approve on the card
ASKER = Press()


def model_env(database_url: str, model_url: str, **settings: str) -> dict[str, str]:
    """What a ``gateway run`` for the contract suite needs besides its surface: the database,
    the fake model server as an OpenAI-compatible agent, a quick poll and stream edits, no web
    chat (``settings`` override and add)."""
    return {
        "DATABASE_URL": database_url,
        "AGENT": "openai",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test-key",
        "AGENT_MODEL": "small",
        "GATEWAY_POLL_SECONDS": "0.2",
        "GATEWAY_WEB_CHAT": "false",
        "GATEWAY_STREAM_EDIT_SECONDS": "0.2",
        **settings,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

    async def edit_question(self, text: str) -> None:
        """The person edits the last ``ask`` to ``text``, as the platform delivers an edit."""
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

    # --- approval cards ---------------------------------------------------------------------

    def card_env(self) -> dict[str, str]:
        """Settings under which approval cards get this surface's buttons (none by default)."""
        return {}

    async def refresh(self) -> None:
        """Read what the bot said so far, where no fake records it (the web chat)."""

    def card(self) -> Card | None:
        """The approval card in the thread of the last ``ask``, once it is there."""
        raise NotImplementedError

    def card_open(self, card: Card) -> bool:
        """The card still offers its buttons (it is retired once decided)."""
        raise NotImplementedError

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """Press ``card``'s button as ``how`` says; returns what the presser is told ("" for
        nothing)."""
        raise NotImplementedError


class TelegramSurface(Surface):
    """A forum topic (with a second topic nothing may land in)."""

    slow_words = 950  # about 7,400 characters: two Telegram messages
    slow_chunk = (150, 0.05)  # the stream stalls near its end until the kill (test_sigkill)
    previews = 2

    async def start(self) -> None:
        self.tg = await self.stack.enter_async_context(FakeTelegram())
        self.asker = self.tg.user("Ann")
        self.forum: Chat = self.tg.forum("Team")
        self.other = self.tg.create_topic(self.forum, "Other")
        self.topic: int | None = None

    def process_env(self) -> dict[str, str]:
        return {"TELEGRAM_BOT_TOKEN": self.tg.token, "TELEGRAM_API_BASE_URL": self.tg.base_url}

    async def ask(self, text: str) -> None:
        self.topic = self.tg.create_topic(self.forum, "Questions")
        self.question = self.tg.user_says(
            self.forum, f"{TELEGRAM_BOT} {text}", topic=self.topic, user=self.asker
        )

    async def edit_question(self, text: str) -> None:
        self.tg.user_edits(self.forum, self.question, f"{TELEGRAM_BOT} {text}")  # edited_message

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

    def card(self) -> Card | None:
        """The bot's message in the topic with an inline keyboard."""
        for m in self.tg.messages_in(self.forum, self.topic):
            if (m.get("from") or {}).get("id") == self.tg.bot.id and "reply_markup" in m:
                return Card(str(m["message_id"]), copy.deepcopy(m))
        return None

    def card_open(self, card: Card) -> bool:
        return "reply_markup" in self.forum.messages[int(card.id)]

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """A ``callback_query`` with the button's ``callback_data``; the answer the bot gives
        it (answerCallbackQuery) is what the presser sees. Another thread: the press arrives
        on the creation message of the forum's other topic."""
        [buttons] = card.shown["reply_markup"]["inline_keyboard"]
        data = buttons[0 if how.approve else 1]["callback_data"]
        who = self.tg.user("Mallory") if how.other_person else self.asker
        on = self.other if how.other_thread else int(card.id)
        query = self.tg.user_clicks(self.forum, on, data, user=who)
        await wait_for(lambda: any(a[0] == query for a in self.tg.callback_answers), timeout=30)
        [(_, text, _)] = [a for a in self.tg.callback_answers if a[0] == query]
        return text or ""


class SlackSurface(Surface):
    """A channel thread over the Events API."""

    async def start(self) -> None:
        self.slack = await self.stack.enter_async_context(FakeSlack())
        self.slack.add_channel(SLACK_CHANNEL, members=(HUMAN, OTHER_HUMAN))
        self.root = ""

    def process_env(self) -> dict[str, str]:
        return {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_BASE_URL": self.slack.api_url,
        }

    async def attached(self, gw: GatewayProcess) -> None:
        self.slack.events_url = f"{gw.url.rstrip('/')}/slack/events"
        self.interactions_url = f"{gw.url.rstrip('/')}/slack/interactions"

    async def ask(self, text: str) -> None:
        posted = await self.slack.user_posts(SLACK_CHANNEL, f"<@{self.slack.bot_user_id}> {text}")
        self.root = posted.ts

    async def edit_question(self, text: str) -> None:
        # a signed message_changed event
        await self.slack.user_edits(SLACK_CHANNEL, self.root, f"<@{self.slack.bot_user_id}> {text}")

    def anywhere(self) -> list[BotMessage]:
        return [BotMessage(m.ts, m.text) for m in self.slack.bot_posts()]

    def in_thread(self) -> list[BotMessage]:
        posts = self.slack.bot_posts(SLACK_CHANNEL)
        return [BotMessage(m.ts, m.text) for m in posts if m.thread_ts == self.root]

    def edited(self) -> bool:
        # an answer streamed natively grows by chat.appendStream; by edits, chat.update
        grown = any(c[0] == "chat.appendStream" for c in self.slack.stream_calls)
        return grown or bool(self.slack.updates)

    def edits_stay_in_thread(self) -> bool:
        return all(u[0] == SLACK_CHANNEL and u[2] == self.root for u in self.slack.updates)

    def sends(self) -> int:
        """Messages the bot began: posted, or streams started."""
        started = self.slack.calls_to("chat.startStream")
        return len(self.slack.calls_to("chat.postMessage")) + len(started)

    def deleted(self) -> list[str]:
        return [ts for _, ts in self.slack.deleted]

    def card(self) -> Card | None:
        """The bot's post in the thread with an actions block (its buttons)."""
        for m in self.slack.bot_posts(SLACK_CHANNEL):
            if m.thread_ts == self.root and any(b.get("type") == "actions" for b in m.blocks or []):
                return Card(m.ts, dataclasses.replace(m, blocks=copy.deepcopy(m.blocks)))
        return None

    def card_open(self, card: Card) -> bool:
        [m] = [m for m in self.slack.bot_posts(SLACK_CHANNEL) if m.ts == card.id]
        return any(b.get("type") == "actions" for b in m.blocks or [])

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """A signed ``block_actions`` POST to the interactivity URL; a refusal is an
        ephemeral message to the presser. Another thread: the button's press arrives from a
        message that roots a thread of its own (a person's, not addressed to the bot)."""
        message = card.shown
        if how.other_thread:
            elsewhere = await self.slack.user_posts(SLACK_CHANNEL, "an unrelated message")
            message = dataclasses.replace(message, ts=elsewhere.ts, thread_ts=elsewhere.ts)
        told = len(self.slack.ephemerals)
        status, body = await self.slack.click_button(
            self.interactions_url,
            message,
            APPROVE_ACTION if how.approve else DENY_ACTION,
            user=OTHER_HUMAN if how.other_person else HUMAN,
        )
        assert status == 200, body
        return "".join(str(e["text"]) for e in self.slack.ephemerals[told:])


class MattermostSurface(Surface):
    """A thread under a root post in Town Square, over the websocket."""

    async def start(self) -> None:
        self.mm = await self.stack.enter_async_context(FakeMattermost())
        self.root = ""
        #: the gateway's port for the approval buttons' URL, the same for every process
        self.port = _free_port()

    def process_env(self) -> dict[str, str]:
        return {"MATTERMOST_URL": self.mm.url, "MATTERMOST_TOKEN": str(self.mm.bot.token)}

    async def attached(self, gw: GatewayProcess) -> None:
        await wait_for(lambda: self.mm.live_connections > 0, timeout=30)

    async def ask(self, text: str) -> None:
        post = await self.mm.user_posts(self.mm.town_square, text, mention_bot=True)
        self.root = str(post["id"])

    async def edit_question(self, text: str) -> None:
        await self.mm.edit_post(self.root, f"@{self.mm.bot.username} {text}")  # post_edited

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

    def card_env(self) -> dict[str, str]:
        """Approve/Deny buttons (the server relays a press to the gateway), at an address
        that stays the same across a restart, as a deployment's does."""
        return {
            "GATEWAY_HTTP_PORT": str(self.port),
            "MATTERMOST_ACTIONS_URL": f"http://127.0.0.1:{self.port}/mattermost/actions",
        }

    def card(self) -> Card | None:
        """The bot's post in the thread with button attachments."""
        posts = self.mm.posts_in(self.mm.town_square, root_id=self.root, by=self.mm.bot)
        for p in posts:
            if p.get("props", {}).get("attachments"):
                return Card(str(p["id"]), copy.deepcopy(p))
        return None

    def card_open(self, card: Card) -> bool:
        return bool(self.mm.posts[card.id].get("props", {}).get("attachments"))

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """The server POSTs the press (with the button's signed context) to the gateway; the
        answer's ``ephemeral_text`` is shown to the presser. Another thread: the asker posts
        a copy of the card's buttons as the root of a thread of its own (a post's props are
        the poster's to set) and presses it there."""
        post_id = card.id
        action = MM_APPROVE if how.approve else MM_DENY
        user = self.mm.bob if how.other_person else self.mm.alice
        if how.other_thread:
            attachments = copy.deepcopy(card.shown["props"]["attachments"])
            copied = await self.mm.user_posts(
                self.mm.town_square, "a copy of the card", props={"attachments": attachments}
            )
            post_id = str(copied["id"])
        if post_id == card.id and not self.card_open(card):
            # decided: the card lost its buttons; a client that has not seen the edit yet
            # still shows them, and the server relays that press as it was shown
            return await self._relay_stale(card, action, user.id)
        status, answer = await self.mm.press_button(post_id, action, user=user)
        assert status == 200, answer
        return str(answer.get("ephemeral_text") or "")

    async def _relay_stale(self, card: Card, action: str, user_id: str) -> str:
        [attachment] = card.shown["props"]["attachments"]
        [button] = [a for a in attachment["actions"] if a["id"] == action]
        body = {
            "user_id": user_id,
            "channel_id": self.mm.town_square.id,
            "team_id": self.mm.team_id,
            "post_id": card.id,
            "context": button["integration"]["context"],
        }
        async with httpx.AsyncClient() as client:
            answer = await client.post(button["integration"]["url"], json=body)
        assert answer.status_code == 200, answer.text
        return str(answer.json().get("ephemeral_text") or "")


class WebSurface(Surface):
    """A thread of the web chat's channel, as a person signed in through a trusted reverse
    proxy (its ``X-Forwarded-User`` header says who each request is from). No fake: the
    thread is read back over the web chat's own API."""

    CHANNEL = "general"

    async def start(self) -> None:
        self.url = ""
        self.thread = ""
        self.count = 0
        #: each thread's assistant messages (the cards among them), as last read
        self.shown: dict[str, list[dict[str, Any]]] = {}

    def process_env(self) -> dict[str, str]:
        return {
            "GATEWAY_WEB_CHAT": "true",
            "GATEWAY_WEB_AUTH": "proxy",
            "GATEWAY_TRUSTED_PROXIES": "127.0.0.0/8",
        }

    async def attached(self, gw: GatewayProcess) -> None:
        self.url = gw.url.rstrip("/")

    async def _call(self, method: str, path: str, *, user: str = "ann", **kw: Any) -> Any:
        async with httpx.AsyncClient(base_url=self.url) as client:
            return await client.request(method, path, headers={"X-Forwarded-User": user}, **kw)

    async def ask(self, text: str) -> None:
        self.count += 1
        self.thread = f"t{self.count}"
        sent = await self._call(
            "POST",
            f"/web/api/channels/{self.CHANNEL}/messages",
            json={"text": text, "client_msg_id": self.thread},
        )
        assert sent.status_code == 200, sent.text
        self.shown.setdefault(self.thread, [])
        self.question = int(sent.json()["seq_no"])

    async def edit_question(self, text: str) -> None:
        path = f"/web/api/channels/{self.CHANNEL}/threads/{self.thread}/messages/{self.question}"
        changed = await self._call("PATCH", path, json={"text": text})  # the edit button's API
        assert changed.status_code == 200, changed.text

    async def refresh(self) -> None:
        listed = await self._call("GET", f"/web/api/channels/{self.CHANNEL}/threads")
        threads = {str(t["thread_id"]) for t in listed.json()["threads"]} | set(self.shown)
        for thread in threads:
            got = await self._call(
                "GET", f"/web/api/channels/{self.CHANNEL}/threads/{thread}/messages"
            )
            messages = got.json()["messages"]
            self.shown[thread] = [m for m in messages if m["role"] == "assistant"]

    def _bot(self, thread: str) -> list[BotMessage]:
        return [BotMessage(str(m["seq_no"]), str(m["content"])) for m in self.shown.get(thread, [])]

    def in_thread(self) -> list[BotMessage]:
        return self._bot(self.thread)

    def anywhere(self) -> list[BotMessage]:
        return [m for thread in self.shown for m in self._bot(thread)]

    def card(self) -> Card | None:
        for m in self.shown.get(self.thread, []):
            if m.get("approval"):
                return Card(str(m["seq_no"]), copy.deepcopy(m))
        return None

    def card_open(self, card: Card) -> bool:
        [m] = [m for m in self.shown.get(self.thread, []) if str(m["seq_no"]) == card.id]
        return bool(m["approval"]["status"] == "pending")

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """The card's button: a POST to the thread's approvals route as the signed-in
        person; the answer's message is what the page shows them."""
        thread = "elsewhere" if how.other_thread else self.thread
        answer = await self._call(
            "POST",
            f"/web/api/channels/{self.CHANNEL}/threads/{thread}/approvals/"
            f"{card.shown['approval']['id']}",
            user="mallory" if how.other_person else "ann",
            json={"decision": "approve" if how.approve else "deny"},
        )
        return str(answer.json()["message"])


class DiscordSurface(Surface):
    """The thread Discord starts on a channel message that mentions the bot, over the
    gateway WebSocket; approval buttons are message components pressed as interactions."""

    #: about 1,400 characters: one Discord message while it streams
    slow_words = 200

    async def start(self) -> None:
        self.dc = await self.stack.enter_async_context(FakeDiscord())
        self.root = ""

    def process_env(self) -> dict[str, str]:
        return discord_env(self.dc)

    async def attached(self, gw: GatewayProcess) -> None:
        await wait_for(lambda: self.dc.live, timeout=30)

    async def ask(self, text: str) -> None:
        message = await self.dc.user_posts(self.dc.general, text, mention_bot=True)
        self.root = str(message["id"])
        self.question = message

    async def edit_question(self, text: str) -> None:
        await self.dc.user_edits(self.question, f"<@{self.dc.bot.id}> {text}")  # MESSAGE_UPDATE

    def in_thread(self) -> list[BotMessage]:
        return [
            BotMessage(str(m["id"]), str(m["content"]))
            for m in self.dc.in_channel(self.root, by=self.dc.bot)
        ]

    def anywhere(self) -> list[BotMessage]:
        return [BotMessage(str(m["id"]), str(m["content"])) for m in self.dc.bot_messages()]

    def edited(self) -> bool:
        return bool(self.dc.edits)

    def edits_stay_in_thread(self) -> bool:
        return all(channel == self.root for channel, _, _ in self.dc.edits)

    def sends(self) -> int:
        return len(self.anywhere()) + len(self.dc.deleted)

    def deleted(self) -> list[str]:
        return list(self.dc.deleted)

    def card(self) -> Card | None:
        """The bot's message in the thread with buttons (components)."""
        for m in self.dc.in_channel(self.root, by=self.dc.bot):
            if m.get("components"):
                return Card(str(m["id"]), copy.deepcopy(m))
        return None

    def card_open(self, card: Card) -> bool:
        return bool(self.dc.messages[card.id].get("components"))

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """An ``INTERACTION_CREATE`` for the button as it was shown; what the presser is
        told is the interaction's answer. Another thread: the same button pressed on a
        message in a thread a person started elsewhere in the channel."""
        [row] = card.shown["components"]
        custom_id = row["components"][0 if how.approve else 1]["custom_id"]
        user = self.dc.bob if how.other_person else self.dc.alice
        message = card.shown
        if how.other_thread:
            other = await self.dc.user_posts(self.dc.general, "an unrelated message")
            thread = await self.dc.user_starts_thread(other, "elsewhere")
            inside = await self.dc.user_posts(thread, "in another thread")
            message = {**copy.deepcopy(inside), "components": card.shown["components"]}
        pressed = await self.dc.press(message, custom_id, user=user)
        return await self.dc.answered(pressed)


class MatrixSurface(Surface):
    """A room of three on a real Synapse homeserver (testsupport.matrix); each question
    mentions the bot at the top level and roots the thread its answer goes to. Reads are
    the room's events as the asker's client sees them."""

    async def start(self) -> None:
        self.server = synapse()
        self.bot = self.server.register("bot")
        self.ann = Person(self.server, self.server.register("ann"))
        self.bob = Person(self.server, self.server.register("bob"))
        self.room = await self.ann.create_room(invite=(self.bot.user_id, self.bob.user_id))
        await self.bob.join(self.room)
        self.root = ""

    def process_env(self) -> dict[str, str]:
        return {
            "MATRIX_HOMESERVER_URL": self.server.url,
            "MATRIX_ACCESS_TOKEN": self.bot.access_token,
            "MATRIX_MESSAGES_PER_SECOND": "100",  # no limits on the test homeserver
        }

    async def attached(self, gw: GatewayProcess) -> None:
        self.gw = gw

        async def joined() -> bool:
            return self.bot.user_id in await self.ann.joined(self.room)

        await wait_for(joined, timeout=30, interval=0.1, message="the bot joined")

    async def ask(self, text: str) -> None:
        self.root = await self.ann.say(self.room, text, mention=self.bot.user_id)

    async def edit_question(self, text: str) -> None:
        await self.ann.edit(self.room, self.root, f"{self.bot.user_id}: {text}")  # m.replace

    def _events(self) -> list[dict[str, Any]]:
        return read_room(self.server, self.ann.account, self.room)

    def _bot(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return texts_by(events, self.bot.user_id)

    def in_thread(self) -> list[BotMessage]:
        mine = self._bot(self._events())
        return [BotMessage(m["event_id"], m["text"]) for m in mine if thread_of(m) == self.root]

    def anywhere(self) -> list[BotMessage]:
        return [BotMessage(m["event_id"], m["text"]) for m in self._bot(self._events())]

    def _edits(self, events: list[dict[str, Any]]) -> list[str]:
        """The event ids the bot's edits replace."""
        out = []
        for e in events:
            relation = e.get("content", {}).get("m.relates_to") or {}
            if e["sender"] == self.bot.user_id and relation.get("rel_type") == "m.replace":
                out.append(str(relation["event_id"]))
        return out

    def edited(self) -> bool:
        return bool(self._edits(self._events()))

    def edits_stay_in_thread(self) -> bool:
        events = self._events()
        ids = {m.id for m in self.in_thread()} | set(self.deleted())
        return all(target in ids for target in self._edits(events))

    def sends(self) -> int:
        """The bot's messages (edits not counted), deleted ones included."""
        events = self._events()
        edits = set()
        for e in events:
            relation = e.get("content", {}).get("m.relates_to") or {}
            if relation.get("rel_type") == "m.replace":
                edits.add(e["event_id"])
        return len(
            [
                e
                for e in events
                if e["sender"] == self.bot.user_id
                and e["type"] == "m.room.message"
                and e["event_id"] not in edits
                and (redacted(e) or e.get("content", {}).get("body") is not None)
                and not (e.get("content", {}).get("m.relates_to") or {}).get("rel_type")
                == "m.replace"
            ]
        )

    def deleted(self) -> list[str]:
        return [
            e["event_id"]
            for e in self._events()
            if e["sender"] == self.bot.user_id and e["type"] == "m.room.message" and redacted(e)
        ]

    # --- approval cards: a message saying how to decide it, decided by a reaction ---------

    #: what a card says under its question (adapters/matrix/transport.py ``send_card``)
    CARD_HINT = f"React with {MATRIX_APPROVE} to approve"

    def card(self) -> Card | None:
        """The bot's message in the thread that asks for a reaction."""
        for m in self._bot(self._events()):
            if thread_of(m) == self.root and self.CARD_HINT in m["content"].get("body", ""):
                return Card(str(m["event_id"]), copy.deepcopy(m))
        return None

    def card_open(self, card: Card) -> bool:
        """Retiring the card edits it (``m.replace``) to the decision, without the hint."""
        [m] = [m for m in self._bot(self._events()) if m["event_id"] == card.id]
        return self.CARD_HINT in m["text"]

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """An ``m.reaction`` (✅ or ❌) on the card, as a person's client sends it; a second
        press of the same key is the client's toggle (its earlier reaction redacted, a new one
        sent: Synapse refuses the same annotation twice). Matrix has no message only the
        presser sees, so what they would be told is read from the gateway's log (the adapter's
        ``matrix_approval_reaction``). Another thread: the reaction lands on the asker's
        message in a thread she started elsewhere in the room."""
        person = self.bob if how.other_person else self.ann
        key = MATRIX_APPROVE if how.approve else MATRIX_DENY
        on = card.id
        if how.other_thread:
            elsewhere = await self.ann.say(self.room, "an unrelated message")
            on = await self.ann.say(self.room, "in another thread", thread=elsewhere)
        for e in self._events():
            relation = e.get("content", {}).get("m.relates_to") or {}
            if (
                e["type"] == "m.reaction"
                and e["sender"] == person.user_id
                and relation.get("event_id") == on
                and relation.get("key") == key
                and not redacted(e)
            ):
                await person.redact(self.room, e["event_id"])
        seen = len(self._told(person.user_id, on))
        await person.react(self.room, on, key)

        def told() -> list[str]:
            return self._told(person.user_id, on)[seen:]

        await wait_for(lambda: bool(told()), timeout=30, message="the reaction was not decided")
        return told()[0]

    def _told(self, user_id: str, event_id: str) -> list[str]:
        """What the gateway would tell ``user_id`` for each of their reactions on
        ``event_id``, oldest first."""
        out = []
        for line in self.gw.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line being written, or not the gateway's
            if (
                entry.get("event") == "matrix_approval_reaction"
                and entry.get("user_id") == user_id
                and entry.get("event_id") == event_id
            ):
                out.append(str(entry.get("told", "")))
        return out


class TeamsSurface(Surface):
    """A reply chain under a channel post that mentions the bot, over the fake Bot
    Framework (each activity signed by its OpenID issuer)."""

    async def start(self) -> None:
        self.teams = await self.stack.enter_async_context(FakeTeams())
        self.root = ""

    def process_env(self) -> dict[str, str]:
        return self.teams.env()

    async def attached(self, gw: GatewayProcess) -> None:
        self.teams.messages_url = f"{gw.url.rstrip('/')}/teams/messages"

    async def ask(self, text: str) -> None:
        posted = await self.teams.user_posts(self.teams.channel, text)
        assert posted.status == 200, posted.body
        self.root = str(posted.activity["id"])

    async def edit_question(self, text: str) -> None:
        # messageUpdate: the edited message whole, its mention with it
        await self.teams.edits(self.root, f"<at>{TEAMS_BOT}</at> {text}")

    def in_thread(self) -> list[BotMessage]:
        posts = self.teams.bot_messages(self.teams.channel, root=self.root)
        return [BotMessage(m.id, m.text) for m in posts]

    def anywhere(self) -> list[BotMessage]:
        return [BotMessage(m.id, m.text) for m in self.teams.bot_messages()]

    def edited(self) -> bool:
        return bool(self.teams.updates)

    def edits_stay_in_thread(self) -> bool:
        return all(self.teams.messages[mid].root == self.root for mid, _ in self.teams.updates)

    def sends(self) -> int:
        return len(self.teams.sends())

    def deleted(self) -> list[str]:
        return list(self.teams.deleted)

    @staticmethod
    def _buttons(message: Message) -> bool:
        return any(a.get("content", {}).get("actions") for a in message.attachments)

    def card(self) -> Card | None:
        """The bot's message in the reply chain with an Adaptive Card that has buttons."""
        for m in self.teams.bot_messages(self.teams.channel, root=self.root):
            if self._buttons(m):
                return Card(m.id, copy.deepcopy(m))
        return None

    def card_open(self, card: Card) -> bool:
        return self._buttons(self.teams.messages[card.id])

    async def press(self, card: Card, how: Press = ASKER) -> str:
        """An ``adaptiveCard/action`` invoke, signed like every activity; the invoke's
        answer is the message Teams shows the presser. Another thread: the press arrives
        from the reply chain of another post in the channel."""
        root = None
        if how.other_thread:
            other = await self.teams.user_posts(self.teams.channel, "unrelated", mention=False)
            root = str(other.activity["id"])
        answer = await self.teams.presses(
            card.shown,
            "approve" if how.approve else "deny",
            person=BOB if how.other_person else ANN,
            root=root,
        )
        assert answer.status == 200, answer.body
        return str(answer.json().get("value") or "")


SURFACES: dict[str, type[Surface]] = {
    "telegram": TelegramSurface,
    "slack": SlackSurface,
    "mattermost": MattermostSurface,
    "discord": DiscordSurface,
    "teams": TeamsSurface,
    "web": WebSurface,
    "matrix": MatrixSurface,
}


@asynccontextmanager
async def surface(name: str) -> AsyncIterator[Surface]:
    """A started surface's fake, stopped on the way out."""
    driver = SURFACES[name](name)
    async with driver.stack:
        await driver.start()
        yield driver
