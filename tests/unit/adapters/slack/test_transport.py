"""The raw send against the fake Web API, through the real slack_sdk AsyncWebClient."""

from __future__ import annotations

import socket

import pytest

from adapters.slack.transport import SlackTransport, make_web_client
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, TEAM_ID, FakeSlack


def transport_for(fake: FakeSlack, *, token: str = BOT_TOKEN, timeout: int = 5) -> SlackTransport:
    return SlackTransport(make_web_client(token=token, base_url=fake.api_url, timeout=timeout))


def target(channel: str, thread: str | None) -> ReplyTarget:
    return ReplyTarget(platform="slack", scope=TEAM_ID, chat_id=channel, thread_id=thread)


async def test_reply_lands_in_the_root_thread(fake: FakeSlack) -> None:
    root, (reply_ts,) = fake.seed_thread("C0GENERAL", [(HUMAN, "a reply")], root_text="root")
    result = await transport_for(fake).send(
        target("C0GENERAL", root), "answer", idempotency_key="d1:0"
    )
    (posted,) = fake.bot_posts("C0GENERAL")
    assert result.platform_message_id == posted.ts
    assert posted.thread_ts == root != reply_ts
    assert posted.text == "answer"
    assert [m.ts for m in fake.channels["C0GENERAL"].thread(root)] == [root, reply_ts, posted.ts]
    (call,) = fake.calls_to("chat.postMessage")
    assert call.params["thread_ts"] == root
    assert call.headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    assert call.params["metadata"]["event_payload"] == {"idempotency_key": "d1:0"}
    assert fake.thread_violations == []


async def test_dm_reply_without_thread_posts_in_the_dm(fake: FakeSlack) -> None:
    await transport_for(fake).send(target("D0DM", None), "hi", idempotency_key="k")
    (call,) = fake.calls_to("chat.postMessage")
    assert "thread_ts" not in call.params
    (posted,) = fake.bot_posts("D0DM")
    assert posted.thread_ts is None


async def test_429_raises_retry_after_and_is_not_retried_by_the_client(fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", status=429, retry_after=3)
    with pytest.raises(DeliveryError) as info:
        await transport_for(fake).send(target("C0GENERAL", None), "x", idempotency_key="k")
    assert info.value.retry_after == 3.0
    assert not info.value.permanent and not info.value.ambiguous
    assert len(fake.calls_to("chat.postMessage")) == 1  # no sdk auto-retry
    assert fake.bot_posts() == []


@pytest.mark.parametrize(
    ("channel", "token", "error"),
    [
        ("C0MISSING", BOT_TOKEN, "channel_not_found"),
        ("C0NOBOT", BOT_TOKEN, "not_in_channel"),
        ("C0GENERAL", "xoxb-revoked", "invalid_auth"),
    ],
)
async def test_permanent_errors(fake: FakeSlack, channel: str, token: str, error: str) -> None:
    with pytest.raises(DeliveryError) as info:
        await transport_for(fake, token=token).send(target(channel, None), "x", idempotency_key="k")
    assert info.value.permanent
    assert error in str(info.value)
    assert len(fake.calls_to("chat.postMessage")) == 1


async def test_timeout_is_ambiguous_and_sent_once(fake: FakeSlack) -> None:
    fake.fail_next("chat.postMessage", delay=1.5)  # answers, but too late
    with pytest.raises(DeliveryError) as info:
        await transport_for(fake, timeout=1).send(
            target("C0GENERAL", None), "x", idempotency_key="k"
        )
    assert info.value.ambiguous and not info.value.permanent
    assert len(fake.calls_to("chat.postMessage")) == 1


async def test_internal_error_is_ambiguous_service_unavailable_is_not(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    fake.fail_next("chat.postMessage", error="internal_error", status=500)
    with pytest.raises(DeliveryError) as info:
        await transport.send(target("C0GENERAL", None), "x", idempotency_key="k")
    assert info.value.ambiguous
    fake.fail_next("chat.postMessage", error="service_unavailable", status=503)
    with pytest.raises(DeliveryError) as info:
        await transport.send(target("C0GENERAL", None), "x", idempotency_key="k")
    assert not info.value.ambiguous and not info.value.permanent


async def test_unreachable_server_is_a_safe_transient_error() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    transport = SlackTransport(
        make_web_client(token=BOT_TOKEN, base_url=f"http://127.0.0.1:{port}/api/", timeout=2)
    )
    with pytest.raises(DeliveryError) as info:
        await transport.send(target("C1", None), "x", idempotency_key="k")
    assert not info.value.ambiguous and not info.value.permanent


def test_limits_pacing_and_typing_contract(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    assert transport.platform == "slack"
    assert transport.max_message_length == 3900
    assert transport.measure("h\u00e9\U0001f600") == 3  # characters, not bytes / UTF-16 units
    assert transport.idempotent is False
    assert list(transport.pace(target("C9", "1.0"))) == [PaceRule(f"channel:{TEAM_ID}:C9", 1.0, 3)]
    assert transport.format("**a**") == "*a*"


async def test_typing_is_a_no_op(fake: FakeSlack) -> None:
    await transport_for(fake).typing(target("C0GENERAL", None))
    assert fake.calls == []
