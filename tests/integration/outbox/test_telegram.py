"""Streaming on Telegram: the answer grows in the exact topic by editMessageText
and ends as exactly one message with the final text; drafts in private chats; a 429 while
streaming slows the preview and the final text still lands once; an answer longer than
4096 continues in a second message in the same topic."""

from __future__ import annotations

from typing import Any

import structlog

from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.openai import OpenAIAgent
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import Chat, FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings

BOT = "@GatewayTestBot"
ANSWER = "Streaming **works**: " + " ".join(f"word{n}" for n in range(60)) + "."
ANSWER_PLAIN = ANSWER.replace("**", "")


def answer_step() -> Step:
    """ANSWER streamed 21 characters every 0.15 s: about 3 s (the fixture's 6 every 0.1 s took
    7), still long enough for a preview edited (at most once a second, the transports'
    ``preview_interval``) twice before the final text. The first chunk is all of
    "Streaming **works**: ", so no preview shows a bold half-written."""
    return Step(text=ANSWER, chunk_chars=21, chunk_delay=0.15)


def gateway(
    database_url: str,
    tg: FakeTelegram,
    fake: FakeOpenAI,
    *,
    pace: tuple[float, float] = (0.05, 0.1),
    **settings: Any,
) -> Any:
    adapter = TelegramAdapter(
        telegram_settings(tg), poll_timeout=1, backoff_initial=0.05, pace=pace
    )
    return running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_TOOLS=False,
        GATEWAY_STREAM_EDIT_SECONDS=0.2,
        **settings,
    )


def bot_messages(tg: FakeTelegram, chat: Chat, topic: int | None) -> list[dict[str, Any]]:
    return [m for m in tg.messages_in(chat, topic) if (m.get("from") or {}).get("id") == tg.bot.id]


async def test_answer_streams_into_the_topic_and_ends_as_one_message(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        other = tg.create_topic(forum, "Elsewhere", by=ann)
        fake.script.append(answer_step())
        async with gateway(database_url, tg, fake) as gw:
            tg.user_says(forum, f"{BOT} tell me something long", topic=topic, user=ann)
            # text is visible while the model is still writing
            await wait_for(lambda: bot_messages(tg, forum, topic), timeout=15)
            first = bot_messages(tg, forum, topic)[0]["text"]
            assert first != ANSWER_PLAIN and ANSWER_PLAIN.startswith(first.rstrip())
            await wait_for(
                lambda: [m["text"] for m in bot_messages(tg, forum, topic)] == [ANSWER_PLAIN],
                timeout=20,
            )
            metrics = gw.metrics.render().decode()
        [final] = bot_messages(tg, forum, topic)
        edits = [e for e in tg.edits if e[1] == final["message_id"]]
        assert len(edits) >= 2, "the preview grew by edits"
        assert edits[-1][2] == ANSWER_PLAIN
        # formatted: the final edit carries the bold entity
        edit_calls = tg.calls("editMessageText")
        assert any("entities" in c.params for c in edit_calls)
        # exactly one sendMessage for the whole answer, in the topic; nothing elsewhere
        assert len(tg.sent_to(forum, topic)) == 1
        assert bot_messages(tg, forum, other) == [] and bot_messages(tg, forum, None) == []
        assert final["message_thread_id"] == topic
        assert 'gateway_stream_previews_total{op="sent",platform="telegram"} 1.0' in metrics
        assert 'gateway_stream_previews_total{op="edited",platform="telegram"}' in metrics
        assert 'gateway_stream_first_text_seconds_count{platform="telegram"} 1.0' in metrics


async def test_private_chat_streams_a_draft_then_sends_the_answer_once(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeTelegram() as tg:
        ann = tg.user("Ann")
        dm = tg.private(ann)
        fake.script.append(answer_step())
        async with gateway(database_url, tg, fake):
            tg.user_says(dm, "tell me something long", user=ann)
            await wait_for(lambda: tg.drafts, timeout=15)
            await wait_for(lambda: bot_messages(tg, dm, None), timeout=20)
        assert [m["text"] for m in bot_messages(tg, dm, None)] == [ANSWER_PLAIN]
        assert len(tg.sent_to(dm)) == 1 and tg.edits == []
        texts = [d[3] for d in tg.drafts]
        assert all(d[0] == dm.id for d in tg.drafts) and len({d[2] for d in tg.drafts}) == 1
        assert len(texts) >= 2 and all(ANSWER_PLAIN.startswith(t.rstrip()) for t in texts)


async def test_429_while_streaming_slows_the_preview_and_the_answer_lands_once(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        fake.script.append(answer_step())
        tg.flood_next("editMessageText", times=2, retry_after=1)
        with structlog.testing.capture_logs() as logs:
            async with gateway(database_url, tg, fake):
                tg.user_says(forum, f"{BOT} tell me something long", topic=topic, user=ann)
                await wait_for(
                    lambda: [m["text"] for m in bot_messages(tg, forum, topic)] == [ANSWER_PLAIN],
                    timeout=30,
                )
        throttled = [e for e in logs if e["event"] == "stream_preview_throttled"]
        assert throttled and all(e["retry_after"] == 1 for e in throttled)
        assert len(tg.sent_to(forum, topic)) == 1


async def test_a_busy_group_budget_never_holds_the_final_text_behind_previews(
    database_url: str, fake: FakeOpenAI
) -> None:
    """A group whose budget allows a burst of three calls and then one an hour (Telegram's
    20 a minute per group, stretched so that nothing depends on timing): the previews take
    only what leaves the final edit its slot, so the final text lands as soon as the model is
    done, and no preview edit is sent after the model's last token. Before, the previews
    spent the whole burst and the final text waited an hour behind them."""
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        fake.script.append(answer_step())
        async with gateway(database_url, tg, fake, pace=(0.05, 3600.0)):
            tg.user_says(forum, f"{BOT} tell me something long", topic=topic, user=ann)
            await wait_for(
                lambda: [m["text"] for m in bot_messages(tg, forum, topic)] == [ANSWER_PLAIN],
                timeout=30,
            )
        [final] = bot_messages(tg, forum, topic)
        last_token = fake.turn_requests[-1].finished
        assert last_token is not None
        writes = [
            r
            for r in tg.requests
            if r.method.lower() in ("sendmessage", "editmessagetext", "deletemessage")
        ]
        # the preview message and one edit of it took two of the three slots; the final the last
        assert [r.method.lower() for r in writes] == ["sendmessage"] + ["editmessagetext"] * 2
        assert [r.params.get("text") for r in writes if r.at >= last_token] == [ANSWER_PLAIN]
        assert int(writes[-1].params["message_id"]) == final["message_id"]


async def test_overflow_continues_in_a_second_message_in_the_same_topic(
    database_url: str, fake: FakeOpenAI
) -> None:
    long = "\n\n".join(f"Paragraph {n}: " + "lorem ipsum dolor sit amet " * 12 for n in range(24))
    assert len(long) > 4096
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        fake.script.append(Step(text=long, chunk_chars=400, chunk_delay=0.1))
        async with gateway(database_url, tg, fake):
            tg.user_says(forum, f"{BOT} write a lot", topic=topic, user=ann)
            # the second message appears while the answer is still being written
            await wait_for(lambda: len(bot_messages(tg, forum, topic)) == 2, timeout=20)
            await wait_for(
                lambda: (
                    "\n\n".join(m["text"] for m in bot_messages(tg, forum, topic))
                    .replace("\n\n", " ")
                    .split()
                    == long.split()
                ),
                timeout=20,
            )
        messages = bot_messages(tg, forum, topic)
        assert len(messages) == 2 and len(tg.sent_to(forum, topic)) == 2
        assert all(m["message_thread_id"] == topic for m in messages)
        assert tg.deleted == []


async def test_a_preview_deleted_mid_stream_is_replaced_by_one_sent_answer(
    database_url: str, fake: FakeOpenAI
) -> None:
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        fake.script.append(answer_step())
        async with gateway(database_url, tg, fake):
            tg.user_says(forum, f"{BOT} tell me something long", topic=topic, user=ann)
            [preview] = await wait_for(lambda: bot_messages(tg, forum, topic), timeout=15)
            # an admin deletes the half-written answer
            del forum.messages[preview["message_id"]]
            await wait_for(
                lambda: [m["text"] for m in bot_messages(tg, forum, topic)] == [ANSWER_PLAIN],
                timeout=20,
            )
        [final] = bot_messages(tg, forum, topic)
        assert final["message_id"] != preview["message_id"]
        assert final["message_thread_id"] == topic
        assert [s.text for s in tg.sent_to(forum, topic)][-1] == ANSWER_PLAIN


async def test_interrupt_mode_restarts_the_answer_in_the_same_preview(
    database_url: str, fake: FakeOpenAI
) -> None:
    """AGENT_BUSY_MODE=interrupt: a message arriving mid-stream cancels the run; the new run
    continues in the preview the first one started, and ends as one message."""
    second = "Both questions answered: " + " ".join(f"part{n}" for n in range(20)) + "."
    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        ann = tg.user("Ann")
        topic = tg.create_topic(forum, "Questions", by=ann)
        fake.script.extend([Step(text=ANSWER, chunk_delay=0.2), Step(text=second)])
        async with gateway(database_url, tg, fake, AGENT_BUSY_MODE="interrupt"):
            tg.user_says(forum, f"{BOT} first question", topic=topic, user=ann)
            [preview] = await wait_for(lambda: bot_messages(tg, forum, topic), timeout=15)
            tg.user_says(forum, f"{BOT} and a second one", topic=topic, user=ann)
            await wait_for(
                lambda: [m["text"] for m in bot_messages(tg, forum, topic)] == [second],
                timeout=30,
            )
        [final] = bot_messages(tg, forum, topic)
        assert final["message_id"] == preview["message_id"]
        assert len(tg.sent_to(forum, topic)) == 1
        assert len(fake.turn_requests) == 2
