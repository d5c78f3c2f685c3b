"""Delivery: POST /api/v4/posts against the fake - root_id is the root, pending_post_id is the
idempotency key, errors become DeliveryError once (429 retry_after, root errors permanent,
timeouts ambiguous but safely retried)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from adapters.mattermost.transport import MattermostTransport
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule
from gateway.outbox.pacing import LocalBudget, pace_rules
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.mattermost import make_config, wait_until


@pytest.fixture
async def adapter(fake: FakeMattermost) -> Any:
    # the transport works without start(): it only needs the REST client
    adapter = MattermostAdapter(make_config(fake, http_timeout=0.3))
    yield adapter
    await adapter.stop()


def target(adapter: MattermostAdapter, channel: str, thread: str | None = None) -> ReplyTarget:
    return ReplyTarget(
        platform="mattermost", scope=adapter.scope, chat_id=channel, thread_id=thread
    )


async def test_reply_to_a_root_post_lands_in_its_thread(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    root = await fake.user_posts(fake.town_square, "question", mention_bot=True)
    result = await adapter.transport.send(
        target(adapter, fake.town_square.id, root["id"]), "answer", idempotency_key="d1:p0"
    )
    replies = fake.posts_in(fake.town_square, root_id=root["id"], by=fake.bot)
    assert [p["message"] for p in replies] == ["answer"]
    assert result.platform_message_id == replies[0]["id"]
    body = fake.requests_to("create_post")[-1].body
    assert body == {
        "channel_id": fake.town_square.id,
        "root_id": root["id"],
        "message": "answer",
        "pending_post_id": "d1:p0",
    }
    assert replies[0]["props"]["from_bot"] == "true"


async def test_dm_answer_without_thread_is_a_top_level_post(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    await adapter.transport.send(target(adapter, fake.dm_alice.id), "hi", idempotency_key="d2:p0")
    assert [p["root_id"] for p in fake.posts_in(fake.dm_alice, by=fake.bot)] == [""]


async def test_parts_in_order_in_the_same_thread(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    root = await fake.user_posts(fake.town_square, "long please", mention_bot=True)
    t = target(adapter, fake.town_square.id, root["id"])
    for i in range(3):
        await adapter.transport.send(t, f"part {i}", idempotency_key=f"d3:p{i}")
    assert [p["message"] for p in fake.posts_in(fake.town_square, root_id=root["id"])] == [
        "part 0",
        "part 1",
        "part 2",
    ]


async def test_same_idempotency_key_posts_once(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    t = target(adapter, fake.town_square.id)
    first = await adapter.transport.send(t, "once", idempotency_key="d4:p0")
    second = await adapter.transport.send(t, "once", idempotency_key="d4:p0")
    assert first == second
    assert len(fake.bot_posts()) == 1


async def test_429_carries_retry_after(fake: FakeMattermost, adapter: MattermostAdapter) -> None:
    fake.rate_limit_next(retry_after=7)
    t = target(adapter, fake.town_square.id)
    with pytest.raises(DeliveryError) as info:
        await adapter.transport.send(t, "busy", idempotency_key="d5:p0")
    assert info.value.retry_after == 7.0
    assert not info.value.permanent
    assert fake.bot_posts() == []
    await adapter.transport.send(t, "busy", idempotency_key="d5:p0")
    assert len(fake.bot_posts()) == 1


async def test_reply_to_a_reply_is_permanent(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    root = await fake.user_posts(fake.town_square, "root")
    reply = await fake.user_posts(fake.town_square, "reply", root_id=root["id"])
    with pytest.raises(DeliveryError) as info:
        await adapter.transport.send(
            target(adapter, fake.town_square.id, reply["id"]), "x", idempotency_key="d6:p0"
        )
    assert info.value.permanent
    assert "api.post.create_post.root_id.app_error" in str(info.value)
    assert fake.bot_posts() == []


@pytest.mark.parametrize(
    ("case", "error_id"),
    [
        ("unknown root", "api.post.create_post.root_id.app_error"),
        ("root in another channel", "api.post.create_post.channel_root_id.app_error"),
        ("not a member", "api.context.permissions.app_error"),
    ],
)
async def test_permanent_errors(
    fake: FakeMattermost, adapter: MattermostAdapter, case: str, error_id: str
) -> None:
    elsewhere = await fake.user_posts(fake.private, "elsewhere")
    lonely = fake.add_channel("not-ours", "O", members={fake.alice.id})
    t = {
        "unknown root": target(adapter, fake.town_square.id, "x" * 26),
        "root in another channel": target(adapter, fake.town_square.id, elsewhere["id"]),
        "not a member": target(adapter, lonely.id),
    }[case]
    with pytest.raises(DeliveryError) as info:
        await adapter.transport.send(t, "x", idempotency_key="d7:p0")
    assert info.value.permanent and error_id in str(info.value)


async def test_length_limit_in_runes(fake: FakeMattermost, adapter: MattermostAdapter) -> None:
    transport = adapter.transport
    assert transport.measure("👍" * 3) == 3  # runes, not UTF-16 units or bytes
    t = target(adapter, fake.town_square.id)
    await transport.send(t, "👍" * transport.max_message_length, idempotency_key="d8:p0")
    with pytest.raises(DeliveryError) as info:
        await transport.send(t, "x" * (transport.max_message_length + 1), idempotency_key="d8:p1")
    assert info.value.permanent and "model.post.is_valid.msg.app_error" in str(info.value)


async def test_timeout_is_ambiguous_and_the_retry_does_not_duplicate(
    fake: FakeMattermost, adapter: MattermostAdapter
) -> None:
    fake.delay_response_next("create_post", 1.0)  # the post is made, the answer is late
    t = target(adapter, fake.town_square.id)
    with pytest.raises(DeliveryError) as info:
        await adapter.transport.send(t, "slow", idempotency_key="d9:p0")
    assert info.value.ambiguous and not info.value.permanent
    assert adapter.transport.idempotent
    result = await adapter.transport.send(t, "slow", idempotency_key="d9:p0")
    posts = fake.bot_posts()
    assert len(posts) == 1 and result.platform_message_id == posts[0]["id"]


async def test_server_unreachable_is_transient(fake: FakeMattermost) -> None:
    url = fake.url
    await fake.close()
    adapter = MattermostAdapter(make_config(fake, url=url))
    try:
        with pytest.raises(DeliveryError) as info:
            await adapter.transport.send(target(adapter, "c"), "x", idempotency_key="k")
        assert not info.value.permanent and not info.value.ambiguous
    finally:
        await adapter.stop()


async def test_5xx_is_transient(fake: FakeMattermost, adapter: MattermostAdapter) -> None:
    fake.fail_next("create_post", 503)
    with pytest.raises(DeliveryError) as info:
        await adapter.transport.send(target(adapter, fake.town_square.id), "x", idempotency_key="k")
    assert not info.value.permanent and info.value.retry_after is None


def test_pace_and_format(adapter: MattermostAdapter) -> None:
    transport: MattermostTransport = adapter.transport
    t = target(adapter, "chan")
    assert PaceRule("channel:chan", 0.2, 5) in transport.pace(t)
    assert transport.format("**bold**") == "**bold**"  # Mattermost renders Markdown


async def test_stop_lets_a_send_in_flight_finish(fake: FakeMattermost) -> None:
    adapter = MattermostAdapter(make_config(fake, http_timeout=5.0))
    fake.delay_response_next("create_post", 0.3)
    send = asyncio.create_task(
        adapter.transport.send(
            target(adapter, fake.town_square.id), "last words", idempotency_key="d10:p0"
        ),
        name="test-send",
    )
    await wait_until(lambda: bool(fake.requests_to("create_post")), message="request out")
    await adapter.stop()
    result = await send  # finished, not cut off by the client closing
    assert result.platform_message_id == fake.bot_posts()[0]["id"]
    with pytest.raises(DeliveryError) as info:  # after stop: retried by the next start
        await adapter.transport.send(
            target(adapter, fake.town_square.id), "late", idempotency_key="d10:p1"
        )
    assert not info.value.permanent


async def test_a_backlog_goes_out_as_a_burst_under_the_servers_default_limiter(
    fake: FakeMattermost,
) -> None:
    """After an outage the answers held back go out at once, then at the server's rate: with
    Mattermost's limiter on at its defaults (10 per second, burst 100, per client address) no
    request is refused, even with other calls of the gateway (reconciliation) in the same
    second. A burst of more than the server's share of it would be refused here."""
    adapter = MattermostAdapter(make_config(fake, http_timeout=10.0))
    fake.limit_rate()  # RateLimitSettings defaults: PerSec 10, MaxBurst 100
    pacing = LocalBudget()
    channels = [fake.add_channel(f"backlog-{i}") for i in range(12)]
    others = 45  # the gateway's other calls in the same instant (reconciliation reads)

    async def other_call() -> int:
        async with aiohttp.ClientSession() as http:
            url = f"{fake.url}/api/v4/users/me"
            headers = {"Authorization": f"Bearer {fake.bot.token}"}
            async with http.get(url, headers=headers) as response:
                return response.status

    async def answer(channel: str, n: int) -> None:
        t = target(adapter, channel)
        await asyncio.sleep(pacing.reserve_now(pace_rules(adapter.transport, t)))
        await adapter.transport.send(t, f"answer {n}", idempotency_key=f"{channel}-{n}")

    try:
        statuses = await asyncio.gather(*(other_call() for _ in range(others)))
        assert statuses == [200] * others
        await asyncio.gather(*(answer(c.id, n) for c in channels for n in range(5)))
    finally:
        await adapter.stop()
    assert fake.limited == 0
    assert len(fake.bot_posts()) == 60
    # the limiter does refuse a burst over it: the next calls at once are over its 101
    refused = await asyncio.gather(*(other_call() for _ in range(60)))
    assert 429 in refused and fake.limited > 0
