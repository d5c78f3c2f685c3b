"""Images and small text files shared with a question go straight to the model as OpenAI
content parts when ``AGENT_INLINE_FILES`` says it accepts them; anything else (and every
file by default) goes to the thread's knowledge base as before."""

from __future__ import annotations

import base64
from dataclasses import replace

import pytest

from gateway.agents.base import ContextMessage, Turn
from gateway.agents.openai import OpenAIAgent
from gateway.core.attachments import FileTooLarge, image_type
from gateway.core.domain import Attachment, ReplyTarget, SessionKey
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.inline import INLINE_TEXT_BYTES
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import KnowledgeStore
from testsupport.documents import make_pdf
from testsupport.fakes.openai import FakeOpenAI
from testsupport.harness import make_settings
from testsupport.knowledge import SharedLocalEmbedder

PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)
KEY = SessionKey(platform="p", scope="s", chat_id="c", thread_id="t")
TARGET = ReplyTarget(platform="p", scope="s", chat_id="c", thread_id="t")


class _Files:
    """A ``FileSource`` port serving fixed bytes by name (the platform fakes are covered in
    test_platform_files.py), honouring ``max_bytes`` as the adapters do."""

    def __init__(self, content: dict[str, bytes]) -> None:
        self.content = content

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        assert attachment.name is not None
        data = self.content[attachment.name]
        if len(data) > max_bytes:
            raise FileTooLarge(f"{attachment.name} is too big")
        return data


def test_image_types_come_from_the_bytes() -> None:
    assert image_type(PNG) == "image/png"
    assert image_type(b"\xff\xd8\xff\xe0....") == "image/jpeg"
    assert image_type(b"GIF89a....") == "image/gif"
    assert image_type(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert image_type(b"%PDF-1.7") is None


async def test_images_and_small_text_files_become_content_parts(kstore: KnowledgeStore) -> None:
    files = _Files(
        {
            "chart.png": PNG,
            "fake.png": b"not an image at all",
            "notes.md": b"# Notes\n\nThe office opens at nine.",
            "big.txt": b"x" * (INLINE_TEXT_BYTES + 1),
            "policy.pdf": make_pdf(["Refunds take thirty days."]),
        }
    )
    shared = [
        Attachment(kind="photo", name="chart.png"),
        Attachment(kind="file", name="fake.png", mime_type="image/png"),
        Attachment(kind="file", name="notes.md", mime_type="text/markdown"),
        Attachment(kind="file", name="big.txt", mime_type="text/plain"),
        Attachment(kind="file", name="policy.pdf", mime_type="application/pdf"),
    ]
    k = Knowledge(
        kstore, SharedLocalEmbedder(), KnowledgeSettings(inline_files=frozenset({"images", "text"}))
    )
    parts, notes, rest = await k.intake.inline_files(shared, files)
    assert parts == [
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()},
        },
        {"type": "text", "text": "File notes.md:\n# Notes\n\nThe office opens at nine."},
    ]
    assert notes == ["⚠️ fake.png is not a PNG, JPEG, GIF or WebP image."]
    assert [a.name for a in rest] == ["big.txt", "policy.pdf"]

    only_images = Knowledge(
        kstore, SharedLocalEmbedder(), KnowledgeSettings(inline_files=frozenset({"images"}))
    )
    parts, _, rest = await only_images.intake.inline_files(shared, files)
    assert [p["type"] for p in parts] == ["image_url"]
    assert [a.name for a in rest] == ["notes.md", "big.txt", "policy.pdf"]
    await k.aclose()
    await only_images.aclose()


async def test_the_parts_reach_the_model_with_the_question(fake: FakeOpenAI) -> None:
    agent = OpenAIAgent(base_url=fake.base_url, api_key="sk-test", model="small")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    question = ContextMessage(seq_no=3, role="user", content="what does the chart show?")
    earlier = ContextMessage(seq_no=1, role="user", content="hello")
    answer = ContextMessage(seq_no=2, role="assistant", content="hi")
    try:
        await agent.respond(
            Turn(
                session_id=1,
                key=KEY,
                target=TARGET,
                context=[earlier, answer, question],
                new_messages=[question],
                system_prompt="be brief",
                attachments=[image],
            )
        )
    finally:
        await agent.aclose()
    messages = fake.turn_requests[-1].body["messages"]
    assert messages[1] == {"role": "user", "content": "hello"}
    assert messages[-1]["content"] == [
        {"type": "text", "text": "what does the chart show?"},
        image,
    ]


def test_an_http_agent_gets_the_parts_in_its_turn_json() -> None:
    from gateway.agents.http import turn_payload

    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    question = ContextMessage(seq_no=1, role="user", content="what is this?")
    turn = Turn(
        session_id=1,
        key=KEY,
        target=TARGET,
        context=[question],
        new_messages=[question],
        attachments=[image],
    )
    assert turn_payload(turn)["attachments"] == [image]
    assert turn_payload(replace(turn, attachments=()))["attachments"] == []


def test_unknown_inline_kinds_name_the_setting() -> None:
    from gateway.core.errors import ConfigError

    with pytest.raises(ConfigError, match="AGENT_INLINE_FILES"):
        make_settings("postgresql://x/y", AGENT_INLINE_FILES="images,video")
    assert make_settings("postgresql://x/y", AGENT_INLINE_FILES="images").agent_inline_files == [
        "images"
    ]
