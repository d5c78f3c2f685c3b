"""Voice notes in a Telegram forum topic, through the real core: the fake Bot API serves the
audio, the fake OpenAI server transcribes it (``POST /v1/audio/transcriptions``), and the
transcript is answered like text in the topic it came from."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.base import Turn
from gateway.agents.openai import OpenAIAgent
from gateway.core.domain import Reply
from gateway.turns.stages.files import LISTENING, NOT_SET_UP
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings

OGG = b"OggS\x00\x02" + bytes(range(200))


class EchoAgent:
    name = "echo-voice"

    def __init__(self) -> None:
        self.turns: list[Turn] = []

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.turns.append(turn)
        return [Reply(text=f"you said: {turn.new_messages[-1].content}", model="echo-voice")]


def voice_note(fake: FakeTelegram, data: bytes) -> dict[str, Any]:
    """A ``Voice`` as a message carries it (Bot API: file_id, duration, mime_type, size)."""
    uploaded = fake.upload("voice.ogg", data, "audio/ogg")
    return {
        "voice": {
            "file_id": uploaded["file_id"],
            "file_unique_id": uploaded["file_unique_id"],
            "duration": 3,
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
    }


def adapter_for(fake: FakeTelegram, chat_id: int) -> TelegramAdapter:
    settings = telegram_settings(fake, TELEGRAM_ANSWER_ALL_CHATS=str(chat_id))
    return TelegramAdapter(settings, poll_timeout=1, backoff_initial=0.05, pace=(0.1, 0.3))


async def test_a_voice_note_in_a_topic_is_transcribed_and_answered_there(
    database_url: str,
    fake: FakeTelegram,
    speech: FakeOpenAI,
) -> None:
    forum = fake.forum("Team")
    topic = fake.create_topic(forum, "Plans")
    speech.transcript = "what time is the standup tomorrow"
    speech.transcription_failures = 1  # the first try fails: the job tries again
    agent = EchoAgent()
    async with running_gateway(
        database_url,
        adapters=[adapter_for(fake, forum.id)],
        TELEGRAM_ANSWER_ALL_CHATS=str(forum.id),
        agent=agent,
        web_chat=False,
        TRANSCRIPTION_BASE_URL=speech.base_url,
        TRANSCRIPTION_API_KEY="sk-voice",
        TRANSCRIPTION_MODEL="whisper-large",
    ) as gw:
        fake.user_says(forum, "", topic=topic, extra=voice_note(fake, OGG))
        await wait_for(lambda: fake.sent_to(forum, topic), timeout=20, message="the answer")
        session = (await gw.store.sessions.list_sessions())[0]
        stored = [m for m in await gw.store.sessions.delta(session.id, 0) if m.role == "user"]
    (answer,) = fake.sent_to(forum, topic)
    assert answer.text == "you said: what time is the standup tomorrow"
    assert [t["bytes"] for t in speech.transcriptions] == [OGG, OGG]  # one retry
    first = speech.transcriptions[-1]
    assert first["model"] == "whisper-large" and first["authorization"] == "Bearer sk-voice"
    (voice,) = stored
    assert voice.content == "what time is the standup tomorrow"
    assert voice.metadata["transcribed"] is True
    assert fake.sent_to(forum, None) == [], "answered in its topic only"


async def test_without_transcription_a_voice_note_gets_one_short_answer(
    database_url: str,
    fake: FakeTelegram,
) -> None:
    forum = fake.forum("Team")
    topic = fake.create_topic(forum, "Plans")
    agent = EchoAgent()
    async with running_gateway(
        database_url,
        adapters=[adapter_for(fake, forum.id)],
        agent=agent,
        web_chat=False,
        # the core's door reads the answer settings from the gateway's settings
        TELEGRAM_ANSWER_ALL_CHATS=str(forum.id),
    ):
        fake.user_says(forum, "", topic=topic, extra=voice_note(fake, OGG))
        await wait_for(lambda: fake.sent_to(forum, topic), timeout=20, message="the answer")
    assert [s.text for s in fake.sent_to(forum, topic)] == [NOT_SET_UP]
    assert agent.turns == [], "the model is not asked"
    assert fake.file_downloads == [], "the audio is not even fetched"


async def test_a_long_voice_note_is_answered_once_when_heard(
    database_url: str,
    fake: FakeTelegram,
    speech: FakeOpenAI,
) -> None:
    """The turn waits half a lease (2.5 s here) and says it is still listening; the
    transcript that comes later is answered then, once."""
    forum = fake.forum("Team")
    topic = fake.create_topic(forum, "Plans")
    speech.transcript = "book the big room for friday"
    speech.transcription_delay = 4.0
    agent = EchoAgent()
    async with running_gateway(
        database_url,
        adapters=[adapter_for(fake, forum.id)],
        TELEGRAM_ANSWER_ALL_CHATS=str(forum.id),
        agent=agent,
        web_chat=False,
        TRANSCRIPTION_BASE_URL=speech.base_url,
    ):
        fake.user_says(forum, "", topic=topic, extra=voice_note(fake, OGG))
        await wait_for(
            lambda: len(fake.sent_to(forum, topic)) == 2, timeout=30, message="both answers"
        )
        await asyncio.sleep(1.0)  # nothing more comes
    assert [s.text for s in fake.sent_to(forum, topic)] == [
        LISTENING,
        "you said: book the big room for friday",
    ]
    assert len(speech.transcriptions) == 1 and len(agent.turns) == 1


async def test_a_voice_reply_to_the_answer_reaches_the_model_as_its_transcript(
    database_url: str,
    fake: FakeTelegram,
    speech: FakeOpenAI,
) -> None:
    """A voice note sent in a topic as a reply to the bot's answer: the model's request ends
    with the transcript (the model reads the context, prefetched with the turn's claim while
    the note was still empty)."""
    forum = fake.forum("Team")
    topic = fake.create_topic(forum, "Plans")
    speech.transcript = "and who is bringing the projector"
    model = await FakeOpenAI().start()
    try:
        async with running_gateway(
            database_url,
            adapters=[adapter_for(fake, forum.id)],
            TELEGRAM_ANSWER_ALL_CHATS=str(forum.id),
            agent=OpenAIAgent(base_url=model.base_url, api_key="k", model="small"),
            web_chat=False,
            TRANSCRIPTION_BASE_URL=speech.base_url,
            GATEWAY_STREAMING=False,
        ):
            fake.user_says(forum, "when is the standup", topic=topic)
            await wait_for(lambda: fake.sent_to(forum, topic), timeout=20, message="answer 1")
            (first,) = fake.sent_to(forum, topic)
            fake.user_says(forum, "", topic=topic, reply_to=first, extra=voice_note(fake, OGG))
            await wait_for(
                lambda: len(fake.sent_to(forum, topic)) == 2, timeout=20, message="answer 2"
            )
    finally:
        await model.stop()
    last = model.turn_requests[-1].contents("user")[-1]
    assert last == "and who is bringing the projector"
    assert fake.sent_to(forum, topic)[-1].text == "re: and who is bringing the projector"
