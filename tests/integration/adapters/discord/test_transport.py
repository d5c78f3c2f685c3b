"""The Discord transport against the fake Discord, without a gateway: a retried send with the
same key posts once (the enforced nonce), the first answer to a channel message starts the
thread on it and later ones go into it, an oversized message is a permanent failure, a 429
names the pace key it closes, and a file goes out and comes back. And the adapter's receive
loop when Discord refuses the message-content intent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from adapters.discord.adapter import DiscordAdapter
from adapters.discord.api import DiscordApi
from adapters.discord.transport import BOT_KEY, DiscordTransport, channel_key
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from testsupport.discord import make_config
from testsupport.fakes.discord import FakeDiscord
from testsupport.harness import RecordingIntake


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        yield server


@pytest.fixture
async def transport(fake: FakeDiscord) -> AsyncIterator[DiscordTransport]:
    t = DiscordTransport(DiscordApi(base_url=fake.api_url, token=fake.token, trust_env=False))
    yield t
    await t.close()


def _thread_target(fake: FakeDiscord, message_id: str) -> ReplyTarget:
    return ReplyTarget(
        platform="discord",
        scope=fake.guild_id,
        chat_id=fake.general.id,
        thread_id=message_id,
        reply_to_message_id=message_id,
        extra={"thread_name": "a question"},
    )


async def test_the_first_answer_starts_the_thread_and_a_retry_posts_once(
    fake: FakeDiscord, transport: DiscordTransport
) -> None:
    question = await fake.user_posts(fake.general, "a question", mention_bot=True)
    target = _thread_target(fake, question["id"])
    first = await transport.send(target, "one", idempotency_key="d1:p1")
    again = await transport.send(target, "one", idempotency_key="d1:p1")
    await transport.send(target, "two", idempotency_key="d2:p1")
    assert first.platform_message_id == again.platform_message_id
    assert fake.threads_started == [question["id"]]
    assert fake.channels[question["id"]].name == "a question"
    texts = [m["content"] for m in fake.in_channel(question["id"], by=fake.bot)]
    assert texts == ["one", "two"]
    assert not fake.in_channel(fake.general.id, by=fake.bot)


async def test_an_oversized_message_fails_for_good_and_a_429_names_its_key(
    fake: FakeDiscord, transport: DiscordTransport
) -> None:
    dm = fake.dm(fake.alice)
    target = ReplyTarget(platform="discord", scope="@me", chat_id=dm.id)
    with pytest.raises(DeliveryError) as too_long:
        await transport.send(target, "x" * 2001, idempotency_key="k1")
    assert too_long.value.permanent
    assert transport.parts("y " * 1500) and all(
        len(p) <= 2000 for p in transport.parts("y " * 1500)
    )
    fake.rate_limit_next("POST", "/messages", 2.5)
    with pytest.raises(DeliveryError) as route:
        await transport.send(target, "hi", idempotency_key="k2")
    assert route.value.retry_after == 2.5 and route.value.hold == (channel_key(dm.id),)
    fake.rate_limit_next("POST", "/messages", 1.5, global_=True)
    with pytest.raises(DeliveryError) as whole:
        await transport.send(target, "hi", idempotency_key="k2")
    assert whole.value.retry_after == 1.5 and whole.value.hold == (BOT_KEY,)
    assert {r.key for r in transport.pace(target)} == {channel_key(dm.id), BOT_KEY}


async def test_a_file_goes_out_and_comes_back(
    fake: FakeDiscord, transport: DiscordTransport
) -> None:
    dm = fake.dm(fake.alice)
    target = ReplyTarget(platform="discord", scope="@me", chat_id=dm.id)
    data = b"%PDF-1.4 a report"
    sent = await transport.send_file(
        target,
        OutgoingFile(name="report.pdf", mime_type="application/pdf", data=data, caption="here"),
        idempotency_key="f1",
    )
    [message] = fake.in_channel(dm.id, by=fake.bot)
    assert message["id"] == sent.platform_message_id and message["content"] == "here"
    [shown] = message["attachments"]
    attachment = Attachment(kind="file", name="report.pdf", url=shown["url"], file_id=shown["id"])
    assert await transport.fetch_file(attachment, max_bytes=1000) == data


async def test_a_gateway_refusing_the_message_content_intent_is_explained() -> None:
    """Discord closes an IDENTIFY asking for the privileged intent the application may not
    use with 4014: the receive loop ends naming the fix (doctor and setup say it too)."""
    async with FakeDiscord(content_intent=False) as fake:
        adapter = DiscordAdapter(make_config(fake))
        with capture_logs() as logs:
            await adapter.start(RecordingIntake())
            task = adapter._task
            assert task is not None
            with pytest.raises(Exception, match="4014"):
                await asyncio.wait_for(task, timeout=20)
        await adapter.stop()
    [event] = [e for e in logs if e["event"] == "discord_message_content_intent_missing"]
    assert "MESSAGE CONTENT INTENT" in event["fix"]
    assert fake.identifies == 0 and 2 in fake.ops
