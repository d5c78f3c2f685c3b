"""Files shared on a platform become documents of their thread: fetched from the platform
fake (real HTTP), read, announced in the thread, and cited with their page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adapters.slack import SlackAdapter
from gateway.core.domain import Attachment, ReplyTarget, SessionKey
from gateway.knowledge.service import Knowledge
from gateway.runtime.gateway import Gateway
from tests.integration.knowledge.test_answers import PAGES, CitingAgent
from testsupport.documents import make_pdf
from testsupport.fakes.slack import FakeSlack
from testsupport.harness import running_gateway, wait_for
from testsupport.knowledge import drain
from testsupport.slack import slack_settings


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        server.add_channel("C0GENERAL")
        yield server


@asynccontextmanager
async def slack_gateway(
    database_url: str, fake: FakeSlack, **settings: Any
) -> AsyncIterator[Gateway]:
    adapter = SlackAdapter(slack_settings(fake))
    async with running_gateway(
        database_url, adapters=[adapter], agent=CitingAgent(), web_chat=False, **settings
    ) as gw:
        fake.events_url = f"{gw.url}slack/events"
        yield gw


async def test_a_pdf_shared_in_a_slack_thread_is_cited_with_its_page(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake) as gw:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> hello")
        await wait_for(lambda: len(fake.bot_posts()) == 1, message="first reply")
        pdf = fake.upload("handbook.pdf", make_pdf(PAGES), "application/pdf")
        await fake.user_posts(
            "C0GENERAL",
            "How long do customers get refunds?",
            thread_ts=root.ts,
            subtype="file_share",
            files=[pdf],
        )
        await wait_for(lambda: len(fake.bot_posts()) == 2, timeout=30, message="the answer")
        answer = fake.bot_posts()[1]
        assert answer.thread_ts == root.ts
        assert answer.text.startswith("📄 handbook.pdf is ready (3 pages")
        assert "refunds within thirty days" in answer.text
        assert answer.text.endswith("[1] handbook.pdf, p. 3")
        assert fake.file_downloads == [pdf["id"]]
        docs = await gw.knowledge.store.list_documents()
        assert [(d.name, d.state, d.kb_name.startswith("thread:slack:")) for d in docs] == [
            ("handbook.pdf", "ready", True)
        ]
    assert fake.thread_violations == []


async def test_too_big_and_unsupported_files_get_a_clear_answer_in_the_thread(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake, GATEWAY_MAX_FILE_BYTES=2000) as gw:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> hello")
        await wait_for(lambda: len(fake.bot_posts()) == 1, message="first reply")
        big = fake.upload("big.pdf", make_pdf(PAGES * 5), "application/pdf")
        blob = fake.upload("tool.bin", bytes(range(256)) * 2, "application/octet-stream")
        await fake.user_posts(
            "C0GENERAL",
            "what about these?",
            thread_ts=root.ts,
            subtype="file_share",
            files=[big, blob],
        )
        await wait_for(lambda: len(fake.bot_posts()) == 2, timeout=30, message="the answer")
        text = fake.bot_posts()[1].text
        assert "big.pdf is" in text and "the limit is 2,000 bytes" in text
        assert "unsupported file type for 'tool.bin'" in text
        assert fake.file_downloads == [blob["id"]], "the too-big file is not even fetched"
        assert await gw.knowledge.store.list_documents() == []


class _Files:
    def __init__(self, content: dict[str, bytes]) -> None:
        self.content = content

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        assert attachment.name is not None
        return self.content[attachment.name]


async def test_a_file_not_read_in_time_is_announced_once_by_the_job_worker(
    knowledge: Knowledge,
) -> None:
    told: list[tuple[str, str]] = []

    async def announce(key: str, text: str) -> None:
        told.append((key, text))

    knowledge.announce = announce
    key = SessionKey(platform="slack", scope="T", chat_id="C", thread_id="1.2")
    target = ReplyTarget(platform="slack", scope="T", chat_id="C", thread_id="1.2")
    files = _Files({"notes.md": b"# Notes\n\nThe office opens at nine."})
    shared = [Attachment(kind="file", name="notes.md", mime_type="text/markdown")]
    notes = await knowledge.intake.take_attachments(key, target, shared, files, wait_seconds=0)
    assert notes == ["⏳ notes.md is still being read; I will say here when it is."]
    await drain(knowledge)
    assert told == [(str(key), "📄 notes.md is ready (1 passage): ask me about it.")]
    # shared again: already read, said at once, and the worker has nothing more to say
    again = await knowledge.intake.take_attachments(key, target, shared, files, wait_seconds=0)
    assert again == ["📄 notes.md is ready (1 passage): ask me about it."]
    await drain(knowledge)
    assert len(told) == 1


async def test_a_pdf_posted_in_mattermost_is_fetched_and_cited(database_url: str) -> None:
    from adapters.mattermost.adapter import MattermostAdapter
    from testsupport.fakes.mattermost import FakeMattermost
    from testsupport.mattermost import connected, make_config

    async with FakeMattermost() as mm:
        adapter = MattermostAdapter(make_config(mm))
        async with running_gateway(
            database_url, adapters=[adapter], agent=CitingAgent(), web_chat=False
        ) as gw:
            await connected(adapter)
            post = await mm.user_posts(
                mm.town_square,
                "How long do customers get refunds?",
                mention_bot=True,
                files=[("handbook.pdf", make_pdf(PAGES), "application/pdf")],
            )

            def answers() -> list[str]:
                return [
                    p["message"] for p in mm.posts_in(mm.town_square, root_id=post["id"], by=mm.bot)
                ]

            await wait_for(answers, timeout=30, message="the answer")
            text = answers()[0]
            assert text.startswith("📄 handbook.pdf is ready (3 pages")
            assert text.endswith("[1] handbook.pdf, p. 3")
            assert mm.file_downloads == post["file_ids"]
            docs = await gw.knowledge.store.list_documents()
            assert [d.name for d in docs] == ["handbook.pdf"]


async def test_a_document_in_a_telegram_topic_is_fetched_with_getfile_and_cited(
    database_url: str,
) -> None:
    from tests.integration.adapters.telegram.test_gateway import adapter_for
    from testsupport.fakes.telegram import FakeTelegram

    async with FakeTelegram() as tg:
        forum = tg.forum("Team")
        alice = tg.user("Alice")
        topic = tg.create_topic(forum, "Policies", by=alice)
        async with running_gateway(
            database_url, adapters=[adapter_for(tg)], agent=CitingAgent(), web_chat=False
        ) as gw:
            document = tg.upload("handbook.pdf", make_pdf(PAGES), "application/pdf")
            tg.user_says(
                forum,
                "@GatewayTestBot How long do customers get refunds?",
                user=alice,
                topic=topic,
                extra={"document": document},
            )
            await wait_for(lambda: tg.sent_to(forum, topic), timeout=30, message="the answer")
            text = tg.sent_to(forum, topic)[0].text
            assert text.startswith("📄 handbook.pdf is ready (3 pages")
            assert text.endswith("[1] handbook.pdf, p. 3")
            assert tg.file_downloads == [document["file_id"]]
            assert [d.name for d in await gw.knowledge.store.list_documents()] == ["handbook.pdf"]
