"""End to end through the real core: fake Bot API -> python-telegram-bot -> the Telegram
adapter -> intake -> PostgreSQL -> turn scheduler -> agent -> delivery -> the Telegram
transport -> fake. Assertions are about where replies landed in the fake's state model."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any

import httpx

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.transport import BURST
from gateway.agents.base import Turn
from gateway.core.domain import Reply, SessionKey
from gateway.runtime.gateway import Gateway
from testsupport.fakes.telegram import Chat, FakeTelegram, utf16_len
from testsupport.harness import assert_paced, running_gateway, wait_for
from testsupport.telegram import telegram_settings

BOT = "@GatewayTestBot"


class RecordingAgent:
    """Echoes the newest message and records every turn (to check each turn's context)."""

    name = "recording"

    def __init__(self, *, delay: float = 0.0, reply: str | None = None) -> None:
        self.turns: list[Turn] = []
        self.delay = delay
        self.reply = reply

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.turns.append(turn)
        if self.delay:
            await asyncio.sleep(self.delay)
        text = self.reply or f"echo: {turn.new_messages[-1].content}"
        return [Reply(text=text, model="recording")]

    def contexts(self, thread: str | None, chat_id: int) -> list[list[str]]:
        return [
            [m.content for m in t.context]
            for t in self.turns
            if t.key.thread_id == thread and t.key.chat_id == str(chat_id)
        ]


#: Telegram's pacing (1 s per chat, 3 s per group) scaled down tenfold to keep tests fast;
#: test_group_sends_are_paced checks the spacing holds at this scale
PACE = (0.1, 0.3)


def adapter_for(fake: FakeTelegram, **overrides: Any) -> TelegramAdapter:
    return TelegramAdapter(
        telegram_settings(fake, **overrides), poll_timeout=1, backoff_initial=0.05, pace=PACE
    )


def texts(fake: FakeTelegram, chat: Chat, topic: int | None = None) -> list[str]:
    return [s.text for s in fake.sent_to(chat, topic)]


def thread_params(fake: FakeTelegram) -> list[str | None]:
    return [c.params.get("message_thread_id") for c in fake.calls("sendMessage")]


async def test_interleaved_places_each_answered_in_place_with_own_context(
    database_url: str, fake: FakeTelegram
) -> None:
    agent = RecordingAgent()
    forum, group = fake.forum("Team"), fake.group("Plain group")
    alice, bob = fake.user("Alice"), fake.user("Bob")
    dm = fake.private(alice)
    topic_a = fake.create_topic(forum, "A", by=alice)
    topic_b = fake.create_topic(forum, "B", by=bob)
    async with running_gateway(
        database_url, adapters=[adapter_for(fake)], agent=agent, web_chat=False
    ):
        fake.user_says(forum, "background for A, no mention", topic=topic_a, user=bob)
        a1 = fake.user_says(forum, f"{BOT} alpha one", topic=topic_a, user=alice)
        b1 = fake.user_says(forum, f"{BOT} beta one", topic=topic_b, user=bob)
        g1 = fake.user_says(forum, f"{BOT} general one", user=alice)
        root = fake.user_says(group, "chain root", user=bob)
        chain = fake.user_says(group, f"{BOT} chain reply", reply_to=root, user=alice)
        d1 = fake.user_says(dm, "private one")
        await fake.wait_until(lambda: len(fake.sent) == 5, within=15, what="5 replies")
        a2 = fake.user_says(forum, f"{BOT} alpha two", topic=topic_a, user=alice)
        await fake.wait_until(lambda: len(fake.sent) == 6, within=15, what="6 replies")

    assert texts(fake, forum, topic_a) == [f"echo: {BOT} alpha one", f"echo: {BOT} alpha two"]
    assert texts(fake, forum, topic_b) == [f"echo: {BOT} beta one"]
    assert texts(fake, forum, None) == [f"echo: {BOT} general one"]
    assert texts(fake, group) == [f"echo: {BOT} chain reply"]
    assert texts(fake, dm) == ["echo: private one"]
    replied_to = {s.text: s.reply_to for s in fake.sent}
    assert replied_to[f"echo: {BOT} alpha one"] == a1["message_id"]
    assert replied_to[f"echo: {BOT} alpha two"] == a2["message_id"]
    assert replied_to[f"echo: {BOT} beta one"] == b1["message_id"]
    assert replied_to[f"echo: {BOT} general one"] == g1["message_id"]
    assert replied_to[f"echo: {BOT} chain reply"] == chain["message_id"]
    assert replied_to["echo: private one"] == d1["message_id"]
    # only topic ids ever went out as message_thread_id: never 1, never the chain root
    assert sorted(p for p in thread_params(fake) if p) == sorted(
        [str(topic_a), str(topic_a), str(topic_b)]
    )
    # each turn saw only its own place
    assert agent.contexts(str(topic_a), forum.id)[-1] == [
        "background for A, no mention",
        f"{BOT} alpha one",
        f"echo: {BOT} alpha one",
        f"{BOT} alpha two",
    ]
    assert agent.contexts(str(topic_b), forum.id) == [[f"{BOT} beta one"]]
    assert agent.contexts(None, forum.id) == [[f"{BOT} general one"]]
    # a non-forum group is one session: the chain root is context, not another thread
    assert agent.contexts(None, group.id) == [["chain root", f"{BOT} chain reply"]]
    assert agent.contexts(None, dm.id) == [["private one"]]


async def test_same_message_delivered_twice_is_answered_once(
    database_url: str, fake: FakeTelegram
) -> None:
    chat = fake.private(fake.user())
    async with running_gateway(database_url, adapters=[adapter_for(fake)], web_chat=False) as gw:
        said = fake.user_says(chat, "only once please")
        await fake.wait_until(lambda: len(fake.sent) == 1, within=10, what="the reply")
        again = fake.push({"message": said})  # a new update_id for the same message
        await fake.wait_until(lambda: again in fake.confirmed, within=10, what="the duplicate")

        async def settled() -> bool:
            counts = await gw.store.outbox.delivery_counts()
            return counts.get("pending", 0) == 0 and counts.get("sending", 0) == 0

        await wait_for(settled, timeout=10)
        metrics = gw.metrics.render().decode()
    assert texts(fake, chat) == ["echo: only once please"]
    assert 'gateway_inbound_events_total{outcome="duplicate",platform="telegram"} 1.0' in metrics


async def test_flood_control_on_first_send_then_one_reply_after_the_wait(
    database_url: str, fake: FakeTelegram
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    fake.flood_next("sendMessage", retry_after=1)
    async with running_gateway(database_url, adapters=[adapter_for(fake)], web_chat=False):
        fake.user_says(forum, f"{BOT} hello", topic=topic)
        await fake.wait_until(lambda: len(fake.sent) == 1, within=15, what="the retried reply")
    first, second = fake.calls("sendMessage")
    assert second.at - first.at >= 1.0
    assert first.params["message_thread_id"] == second.params["message_thread_id"] == str(topic)
    assert texts(fake, forum, topic) == [f"echo: {BOT} hello"]


async def test_ten_thousand_characters_arrive_as_ordered_parts_in_the_same_topic(
    database_url: str, fake: FakeTelegram
) -> None:
    sentences = [f"Sentence number {i} has a few words in it." for i in range(250)]
    long_text = " ".join(sentences)
    assert len(long_text) >= 10_000
    forum = fake.forum()
    topic = fake.create_topic(forum, "Essay")
    agent = RecordingAgent(reply=long_text)
    async with running_gateway(
        database_url, adapters=[adapter_for(fake)], agent=agent, web_chat=False
    ):
        fake.user_says(forum, f"{BOT} write a lot", topic=topic)
        await fake.wait_until(
            lambda: (
                bool(fake.sent) and fake.sent[-1].text.endswith("number 249 has a few words in it.")
            ),
            within=20,
            what="the last part",
        )
    parts = texts(fake, forum, topic)
    assert len(parts) == 3
    assert all(utf16_len(p) <= 4096 for p in parts)
    assert " ".join(p.strip() for p in parts).split() == long_text.split()
    assert [s.topic for s in fake.sent] == [topic] * 3


async def test_group_sends_are_paced_per_group_not_across_chats(
    database_url: str, fake: FakeTelegram
) -> None:
    forum = fake.forum()
    topics = [fake.create_topic(forum, name) for name in "ABCDE"]
    dm = fake.private(fake.user("Dora"))
    async with running_gateway(database_url, adapters=[adapter_for(fake)], web_chat=False):
        for n, topic in enumerate(topics):
            fake.user_says(forum, f"{BOT} message {n}", topic=topic)
        fake.user_says(forum, f"{BOT} in General")
        fake.user_says(dm, "not blocked by the group")
        await fake.wait_until(lambda: len(fake.sent) == 7, within=10, what="7 replies")
    group_sends = [c.at for c in fake.calls("sendMessage") if c.params["chat_id"] == str(forum.id)]
    dm_send = next(c.at for c in fake.calls("sendMessage") if c.params["chat_id"] == str(dm.id))
    assert len(group_sends) == 6
    # a short burst goes at once, then the group's interval holds (half of it spared)
    assert_paced(group_sends, PACE[1], BURST, at_least=0.5)
    assert dm_send < group_sends[-1]  # the private chat did not wait behind the group


async def test_deleted_topic_is_a_visible_failed_delivery(
    database_url: str, fake: FakeTelegram
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "Soon gone")
    agent = RecordingAgent(delay=0.3)
    async with running_gateway(
        database_url, adapters=[adapter_for(fake)], agent=agent, web_chat=False
    ) as gw:
        fake.user_says(forum, f"{BOT} are you there?", topic=topic)
        await wait_for(lambda: agent.turns, timeout=10)
        fake.delete_topic(forum, topic)  # deleted while the agent thinks
        session = await wait_for(lambda: _session_of(gw, forum, topic), timeout=10)
        assert session is not None

        async def failed() -> Any:
            rows = await gw.store.outbox.deliveries_for_session(session)
            return rows if rows and rows[0].status == "failed" else None

        [row] = await wait_for(failed, timeout=10)
    assert "message thread not found" in (row.last_error or "").lower()
    assert row.target.thread_id == str(topic)
    assert fake.sent == []  # never posted to General or anywhere else instead


async def _session_of(gw: Gateway, chat: Chat, topic: int | None) -> int | None:
    from gateway.core.domain import SessionKey

    key = SessionKey(
        platform="telegram",
        scope="bot",
        chat_id=str(chat.id),
        thread_id=None if topic is None else str(topic),
    )
    record = await gw.store.sessions.find_session(key)
    return record.id if record is not None else None


async def test_new_and_help_commands_stay_in_their_topic(
    database_url: str, fake: FakeTelegram
) -> None:
    agent = RecordingAgent()
    forum = fake.forum()
    topic_a, topic_b = fake.create_topic(forum, "A"), fake.create_topic(forum, "B")
    async with running_gateway(
        database_url, adapters=[adapter_for(fake)], agent=agent, web_chat=False
    ) as gw:
        fake.user_says(forum, f"{BOT} remember X", topic=topic_a)
        fake.user_says(forum, f"{BOT} remember Y", topic=topic_b)
        await fake.wait_until(lambda: len(fake.sent) == 2, within=10, what="2 replies")
        old_a = await _session_of(gw, forum, topic_a)
        old_b = await _session_of(gw, forum, topic_b)
        fake.user_says(forum, "/new@GatewayTestBot", topic=topic_a)
        await fake.wait_until(lambda: len(fake.sent) == 3, within=10, what="/new answer")
        fake.user_says(forum, "/new@SomeOtherBot", topic=topic_b)  # not ours: ignored
        fake.user_says(forum, "/help", topic=topic_b)
        await fake.wait_until(lambda: len(fake.sent) == 4, within=10, what="/help answer")
        fake.user_says(forum, f"{BOT} fresh start", topic=topic_a)
        await fake.wait_until(lambda: len(fake.sent) == 5, within=10, what="5 replies")
        assert await _session_of(gw, forum, topic_a) != old_a
        assert await _session_of(gw, forum, topic_b) == old_b
    a_texts, b_texts = texts(fake, forum, topic_a), texts(fake, forum, topic_b)
    assert a_texts[1].startswith("Started a new session")
    assert a_texts[2] == f"echo: {BOT} fresh start"
    assert "/new" in b_texts[1] and "/help" in b_texts[1]
    assert agent.contexts(str(topic_a), forum.id)[-1] == [f"{BOT} fresh start"]
    assert fake.sent_to(forum, None) == []


async def test_typing_indicator_in_the_same_topic(database_url: str, fake: FakeTelegram) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    agent = RecordingAgent(delay=0.5)
    async with running_gateway(
        database_url, adapters=[adapter_for(fake)], agent=agent, web_chat=False
    ):
        fake.user_says(forum, f"{BOT} think", topic=topic)
        await fake.wait_until(lambda: len(fake.sent) == 1, within=10, what="the reply")
    assert fake.typing and set(fake.typing) == {(forum.id, topic, "typing")}


async def test_bots_edits_and_service_messages_are_not_answered(
    database_url: str, fake: FakeTelegram
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    other_bot = fake.user("Helper", username="HelperBot", is_bot=True)
    # the edit only changes the context (an answer rewritten in place: tests/.../test_edits.py)
    async with running_gateway(
        database_url, adapters=[adapter_for(fake)], web_chat=False, GATEWAY_ON_EDIT="context"
    ) as gw:
        asked = fake.user_says(forum, f"{BOT} first", topic=topic)
        await fake.wait_until(lambda: len(fake.sent) == 1, within=10, what="the reply")
        fake.user_says(forum, f"{BOT} I am a bot", topic=topic, user=other_bot)
        fake.user_edits(forum, asked, f"{BOT} first (edited)")
        fake.close_topic(forum, topic)
        fake.user_says(fake.channel("News"), f"{BOT} channel post")
        fake.user_says(forum, f"{BOT} in general after all that")
        await fake.wait_until(lambda: len(fake.sent) == 2, within=10, what="the General reply")
        metrics = gw.metrics.render().decode()
    assert texts(fake, forum, topic) == [f"echo: {BOT} first"]
    assert texts(fake, forum, None) == [f"echo: {BOT} in general after all that"]
    # topic created + topic closed + the channel post were recorded as ignored
    assert 'gateway_inbound_events_total{outcome="ignored",platform="telegram"} 3.0' in metrics


async def test_webhook_mode_through_the_gateway_http_server(
    database_url: str, fake: FakeTelegram
) -> None:
    port = _free_port()
    secret = "hook-secret_1"
    adapter = adapter_for(
        fake,
        TELEGRAM_MODE="webhook",
        TELEGRAM_WEBHOOK_URL=f"http://127.0.0.1:{port}/telegram/webhook",
        TELEGRAM_WEBHOOK_SECRET=secret,
    )
    forum = fake.forum()
    topic = fake.create_topic(forum, "Hooks")
    async with (
        running_gateway(
            database_url, adapters=[adapter], web_chat=False, GATEWAY_HTTP_PORT=port
        ) as gw,
        httpx.AsyncClient() as client,
    ):
        said = fake.user_says(forum, f"{BOT} via webhook", topic=topic)
        update_id = max(fake.history)
        await fake.wait_until(lambda: len(fake.sent) == 1, within=10, what="the reply")
        # Telegram retries an update whose answer it did not get: stored and answered once
        fake.replay(update_id)
        forged = {"update_id": 1, "message": {**said, "text": f"{BOT} forged"}}
        wrong = await client.post(
            f"{gw.url}telegram/webhook",
            json=forged,
            headers={"X-Telegram-Bot-Api-Secret-Token": "nope"},
        )
        assert wrong.status_code == 403
        await fake.wait_until(
            lambda: fake.pending_update_ids() == [], within=10, what="the replay to be acknowledged"
        )
        metrics = gw.metrics.render().decode()
    assert texts(fake, forum, topic) == [f"echo: {BOT} via webhook"]
    assert [s for _, s in fake.webhook_pushes] == [200, 200, 200]
    assert 'gateway_inbound_events_total{outcome="duplicate",platform="telegram"} 1.0' in metrics
    # the forged update was refused before intake: the only message accepted is the real one
    assert 'gateway_inbound_events_total{outcome="accepted",platform="telegram"} 1.0' in metrics


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_thumbs_reactions_on_a_reply_are_its_feedback(
    database_url: str, fake: FakeTelegram
) -> None:
    person = fake.user()
    chat = fake.private(person)
    async with running_gateway(database_url, adapters=[adapter_for(fake)], web_chat=False) as gw:
        said = fake.user_says(chat, "rate this")
        await fake.wait_until(lambda: len(fake.sent) == 1, within=10, what="the reply")
        reply = fake.sent[0]

        async def marked_sent() -> bool:
            # the receipt (platform message id) is stored just after the send returns; a
            # reaction can only be matched to the reply once it is
            return (await gw.store.outbox.delivery_counts()).get("sent", 0) == 1

        await wait_for(marked_sent, message="the receipt")

        def react(message_id: int, old: list[str], new: list[str]) -> int:
            return fake.push(
                {
                    "message_reaction": {
                        "chat": {"id": chat.id, "type": "private"},
                        "message_id": message_id,
                        "user": {"id": person.id, "is_bot": False, "first_name": "P"},
                        "date": 0,
                        "old_reaction": [{"type": "emoji", "emoji": e} for e in old],
                        "new_reaction": [{"type": "emoji", "emoji": e} for e in new],
                    }
                }
            )

        async def feedback() -> int | None:
            session = await gw.store.sessions.find_session(
                SessionKey(platform="telegram", scope="bot", chat_id=str(chat.id))
            )
            assert session is not None
            return (await gw.store.sessions.feedback_by_seq(session.id)).get(2)

        async def becomes(value: int) -> bool:
            return await feedback() == value

        done = react(reply.message_id, [], ["👍"])
        await fake.wait_until(lambda: done in fake.confirmed, within=10, what="the reaction")
        await wait_for(lambda: becomes(1), message="+1 stored")
        react(reply.message_id, ["👍"], ["👎"])
        await wait_for(lambda: becomes(-1), message="changed to -1")
        # a reaction on the person's own message is not feedback on the bot
        last = react(said["message_id"], [], ["👍"])
        await fake.wait_until(lambda: last in fake.confirmed, within=10, what="the last reaction")
        assert await feedback() == -1
