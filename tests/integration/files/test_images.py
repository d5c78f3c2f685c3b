"""A screenshot shared in a Telegram topic: a model declared to accept images gets the image;
any other model gets its text, read by OCR whose weights ship in the ``ocr`` extra's wheel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.base import Turn
from gateway.core.domain import Reply
from testsupport.documents import text_png
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
from testsupport.telegram import telegram_settings

SCREENSHOT = text_png(["ERROR 502: upstream timed out"])


class SeeingAgent:
    """Records the content parts each turn brings."""

    name = "seeing"

    def __init__(self) -> None:
        self.parts: list[Sequence[Mapping[str, Any]]] = []

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.parts.append(list(turn.attachments))
        return [Reply(text="looked", model="seeing")]


def photo(fake: FakeTelegram, data: bytes) -> dict[str, Any]:
    """A ``photo`` as a message carries it: its sizes, the largest last (Bot API PhotoSize)."""
    uploaded = fake.upload("photo.png", data, "image/png")
    size = {k: uploaded[k] for k in ("file_id", "file_unique_id", "file_size")}
    return {"photo": [{**size, "width": 600, "height": 80}], "caption": "what broke?"}


async def ask_with_screenshot(database_url: str, fake: FakeTelegram, **settings: Any) -> Any:
    forum = fake.forum("Team")
    topic = fake.create_topic(forum, "Incidents")
    adapter = TelegramAdapter(
        telegram_settings(fake, TELEGRAM_ANSWER_ALL_CHATS=str(forum.id)),
        poll_timeout=1,
        backoff_initial=0.05,
        pace=(0.1, 0.3),
    )
    agent = SeeingAgent()
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=agent,
        web_chat=False,
        AGENT_MODEL="small",
        # the core's door reads the answer settings from the gateway's settings
        TELEGRAM_ANSWER_ALL_CHATS=str(forum.id),
        **settings,
    ) as gw:
        fake.user_says(forum, "", topic=topic, extra=photo(fake, SCREENSHOT))
        await wait_for(lambda: fake.sent_to(forum, topic), timeout=60, message="the answer")
        documents = await gw.knowledge.store.list_documents()
    assert documents == [], "an image is looked at, not added to the documents"
    assert [s.text for s in fake.sent_to(forum, topic)] == ["looked"]
    (parts,) = agent.parts
    return parts


async def test_a_screenshot_reaches_a_model_without_vision_as_its_ocr_text(
    database_url: str, fake: FakeTelegram
) -> None:
    parts = await ask_with_screenshot(database_url, fake, AGENT_VISION_MODELS="gpt-4o*")
    (part,) = parts
    assert part["type"] == "text"
    assert part["text"].startswith("Text read by OCR from the image")
    assert "ERROR 502" in part["text"] and "timed out" in part["text"]


async def test_a_screenshot_reaches_a_vision_model_as_an_image(
    database_url: str, fake: FakeTelegram
) -> None:
    parts = await ask_with_screenshot(database_url, fake, AGENT_VISION_MODELS="gpt-4o*,small")
    (part,) = parts
    assert part["type"] == "image_url"
    assert part["image_url"]["url"].startswith("data:image/png;base64,")
