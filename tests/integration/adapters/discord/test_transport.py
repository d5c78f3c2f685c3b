"""The Discord transport against the fake Discord, without a gateway: a retried send with the
same key posts once (the enforced nonce), the first answer to a channel message starts the
thread on it and later ones go into it, an oversized message is a permanent failure, a 429
names the pace key it closes, and a file goes out and comes back."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.discord.api import DiscordApi
from adapters.discord.transport import BOT_KEY, DiscordTransport, channel_key
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from testsupport.fakes.discord import FakeDiscord


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
