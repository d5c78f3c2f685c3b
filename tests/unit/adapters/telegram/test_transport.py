"""The raw send against the fake Bot API, through the real python-telegram-bot: every reply
lands in the exact place (topic, General, private chat, reply chain), and each failure is
translated into the right DeliveryError."""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
import socket
import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
from telegram.error import RetryAfter
from telegram.request import HTTPXRequest

from adapters.telegram import http as telegram_http
from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.extract import BotIdentity, extract_update
from adapters.telegram.http import AiohttpRequest
from adapters.telegram.transport import (
    BURST,
    TelegramBot,
    TelegramTransport,
    retry_after_seconds,
    translate_error,
)
from gateway.core.domain import Envelope, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from testsupport.fakes.telegram import FakeTelegram
from testsupport.telegram import AdapterFactory


@pytest.fixture
async def transport(fake: FakeTelegram) -> AsyncIterator[TelegramTransport]:
    t = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    yield t
    await t.close()


def target_of(fake: FakeTelegram, message: dict[str, Any]) -> ReplyTarget:
    """The stored target exactly as ingest computes it from the update the fake emitted."""
    identity = BotIdentity(id=fake.bot.id, username=fake.bot.username or "")
    kind = "business_message" if "business_connection_id" in message else "message"
    result = admit(extract_update({"update_id": 1, kind: message}, bot=identity), AnswerRules())
    assert isinstance(result, Envelope), result
    return result.target


def last_send_params(fake: FakeTelegram) -> dict[str, Any]:
    return fake.calls("sendMessage")[-1].params


async def test_topic_message_reply_lands_in_its_topic(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic_a = fake.create_topic(forum, "A")
    topic_b = fake.create_topic(forum, "B")
    asked = fake.user_says(forum, "question", topic=topic_a)
    result = await transport.send(target_of(fake, asked), "answer", idempotency_key="k")
    params = last_send_params(fake)
    assert params["message_thread_id"] == str(topic_a)
    assert json.loads(params["reply_parameters"])["message_id"] == asked["message_id"]
    assert "parse_mode" not in params  # plain text: entities can never be invalid
    [sent] = fake.sent_to(forum, topic_a)
    assert sent.text == "answer" and sent.reply_to == asked["message_id"]
    assert result.platform_message_id == str(sent.message_id)
    assert fake.sent_to(forum, topic_b) == [] and fake.sent_to(forum, None) == []


async def test_general_reply_omits_the_thread(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    fake.create_topic(forum, "A")
    asked = fake.user_says(forum, "in general")
    await transport.send(target_of(fake, asked), "answer", idempotency_key="k")
    assert "message_thread_id" not in last_send_params(fake)
    assert [s.text for s in fake.sent_to(forum, None)] == ["answer"]


async def test_reply_inside_general_never_sends_the_chain_id(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    root = fake.user_says(forum, "root")
    asked = fake.user_says(forum, "reply in general", reply_to=root)
    assert asked["message_thread_id"] == root["message_id"]  # the trap
    await transport.send(target_of(fake, asked), "answer", idempotency_key="k")
    assert "message_thread_id" not in last_send_params(fake)
    assert [s.text for s in fake.sent_to(forum, None)] == ["answer"]


async def test_nonforum_reply_chain_omits_the_thread(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    group = fake.group()
    root = fake.user_says(group, "root")
    asked = fake.user_says(group, "reply", reply_to=root)
    assert asked["message_thread_id"] == root["message_id"]
    await transport.send(target_of(fake, asked), "answer", idempotency_key="k")
    params = last_send_params(fake)
    assert "message_thread_id" not in params
    assert json.loads(params["reply_parameters"])["message_id"] == asked["message_id"]
    assert fake.sent[-1].chat_id == group.id


async def test_private_chat_omits_the_thread(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    alice = fake.user("Alice")
    chat = fake.private(alice)
    asked = fake.user_says(chat, "hi")
    await transport.send(target_of(fake, asked), "hello", idempotency_key="k")
    assert "message_thread_id" not in last_send_params(fake)
    assert [s.text for s in fake.sent_to(chat, None)] == ["hello"]


async def test_private_chat_topic(fake: FakeTelegram, transport: TelegramTransport) -> None:
    alice = fake.user("Alice")
    chat = fake.private(alice, topics=True)
    topic = fake.create_topic(chat, "Trip", by=alice)
    asked = fake.user_says(chat, "plan it", topic=topic)
    await transport.send(target_of(fake, asked), "ok", idempotency_key="k")
    assert last_send_params(fake)["message_thread_id"] == str(topic)
    assert [s.text for s in fake.sent_to(chat, topic)] == ["ok"]


async def test_business_and_dm_topic_routing(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    owner, customer = fake.user("Owner"), fake.user("Carol")
    connection = fake.business_connection(owner)
    chat = fake.business_chat(connection, customer)
    asked = fake.user_says(chat, "is the shop open?")
    await transport.send(target_of(fake, asked), "yes", idempotency_key="k")
    assert last_send_params(fake)["business_connection_id"] == connection
    assert fake.sent[-1].business_connection_id == connection

    dms = fake.direct_messages()
    asked = fake.user_says(dms, "hello channel", user=customer)
    target = target_of(fake, asked)
    await transport.send(target, "hi", idempotency_key="k2")
    params = last_send_params(fake)
    assert params["direct_messages_topic_id"] == target.extra["direct_messages_topic_id"]
    assert "message_thread_id" not in params


async def test_reply_still_lands_in_the_topic_when_the_question_was_deleted(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    asked = fake.user_says(forum, "question", topic=topic)
    del forum.messages[asked["message_id"]]
    await transport.send(target_of(fake, asked), "answer", idempotency_key="k")
    assert [s.text for s in fake.sent_to(forum, topic)] == ["answer"]


async def test_typing_in_the_same_thread(fake: FakeTelegram, transport: TelegramTransport) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    await transport.typing(target_of(fake, fake.user_says(forum, "q", topic=topic)))
    await transport.typing(target_of(fake, fake.user_says(forum, "q in general")))
    assert fake.typing == [(forum.id, topic, "typing"), (forum.id, None, "typing")]
    assert "message_thread_id" not in fake.calls("sendChatAction")[-1].params


async def test_typing_failure_is_swallowed(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    target = target_of(fake, fake.user_says(forum, "q", topic=topic))
    fake.delete_topic(forum, topic)
    await transport.typing(target)  # cosmetic: must not raise
    assert fake.typing == []


# --- failures -------------------------------------------------------------------------------


async def test_flood_control_becomes_retry_after(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    fake.flood_next(retry_after=7)
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "answer", idempotency_key="k")
    assert caught.value.retry_after == 7
    assert not caught.value.permanent and not caught.value.ambiguous
    assert fake.sent == []
    await transport.send(target, "answer", idempotency_key="k")
    assert len(fake.sent) == 1


async def test_deleted_topic_is_a_permanent_thread_not_found(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    target = target_of(fake, fake.user_says(forum, "q", topic=topic))
    fake.delete_topic(forum, topic)
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "answer", idempotency_key="k")
    assert caught.value.permanent
    assert "message thread not found" in str(caught.value).lower()
    assert fake.sent == []  # never a silent post somewhere else


@pytest.mark.parametrize("thread", ["1", "chain"])
async def test_fake_refuses_general_id_and_chain_ids(
    fake: FakeTelegram, transport: TelegramTransport, thread: str
) -> None:
    """The fake enforces what the real server does, so a regression that sends 1 or a
    reply-chain id cannot pass the other tests."""
    forum = fake.forum()
    root = fake.user_says(forum, "root")
    asked = fake.user_says(forum, "reply", reply_to=root)
    bad = ReplyTarget(
        platform="telegram",
        scope="bot",
        chat_id=str(forum.id),
        thread_id="1" if thread == "1" else str(asked["message_thread_id"]),
    )
    with pytest.raises(DeliveryError) as caught:
        await transport.send(bad, "x", idempotency_key="k")
    assert caught.value.permanent and "thread not found" in str(caught.value).lower()


async def test_unknown_chat_is_permanent(transport: TelegramTransport) -> None:
    target = ReplyTarget(platform="telegram", scope="bot", chat_id="-100404")
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "x", idempotency_key="k")
    assert caught.value.permanent and "chat not found" in str(caught.value).lower()


async def test_blocked_by_user_is_permanent(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    fake.fail_next("sendMessage", status=403, description="Forbidden: bot was blocked by the user")
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "x", idempotency_key="k")
    assert caught.value.permanent and "blocked" in str(caught.value)


async def test_server_error_is_transient(fake: FakeTelegram, transport: TelegramTransport) -> None:
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    fake.fail_next("sendMessage", status=502, description="Bad Gateway")
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "x", idempotency_key="k")
    error = caught.value
    assert not error.permanent and not error.ambiguous and error.retry_after is None


async def test_connection_lost_after_posting_is_ambiguous(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    fake.drop_next("sendMessage", after_applying=True)
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "x", idempotency_key="k")
    assert caught.value.ambiguous and not caught.value.permanent
    assert len(fake.sent) == 1  # it did post: a blind retry would double it


@pytest.mark.parametrize("request_class", [HTTPXRequest, AiohttpRequest])
async def test_read_timeout_is_ambiguous(fake: FakeTelegram, request_class: type[Any]) -> None:
    """A read timeout means the message may have been posted, over PTB's own request (httpx)
    and the default one (aiohttp)."""
    bot = TelegramBot(fake.token, base_url=fake.base_url, request=request_class(read_timeout=0.2))
    transport = TelegramTransport(bot)
    try:
        chat = fake.private(fake.user())
        target = target_of(fake, fake.user_says(chat, "hi"))
        await transport.open()
        fake.delay_next("sendMessage", 1.0)
        with pytest.raises(DeliveryError) as caught:
            await transport.send(target, "x", idempotency_key="k")
        assert caught.value.ambiguous
    finally:
        await transport.close()


async def test_no_connection_over_aiohttp_is_a_plain_failure_without_the_token() -> None:
    """Nothing listens: the request never left, so a retry cannot post twice; the error
    does not carry the token of the URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token = "123:s3cret-token"
    transport = TelegramTransport(TelegramBot(token, base_url=f"http://127.0.0.1:{port}/bot"))
    target = ReplyTarget(platform="telegram", scope="bot", chat_id="1")
    try:
        with pytest.raises(DeliveryError) as caught:
            await transport.send(target, "x", idempotency_key="k")
        assert not caught.value.ambiguous and not caught.value.permanent
        assert "s3cret" not in str(caught.value)
    finally:
        await transport.close()


async def test_a_proxy_in_the_environment_is_used(
    fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP(S)_PROXY still applies (as with PTB's default httpx request): here it names a
    port nothing listens on, so the send fails instead of going to the fake directly."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
    telegram_http._proxied_origin.cache_clear()
    transport = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    try:
        with pytest.raises(DeliveryError):
            await transport.send(target, "x", idempotency_key="k")
        assert not fake.sent
    finally:
        await transport.close()
        telegram_http._proxied_origin.cache_clear()


async def test_too_long_is_permanent_and_measure_counts_utf16(
    fake: FakeTelegram, transport: TelegramTransport
) -> None:
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    fits = "😀" * 2048  # 2048 code points, 4096 UTF-16 units
    assert transport.measure(fits) == 4096 == transport.max_message_length
    await transport.send(target, fits, idempotency_key="k")
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, fits + "a", idempotency_key="k2")
    assert caught.value.permanent and "too long" in str(caught.value).lower()


async def test_send_after_stop_is_transient(fake: FakeTelegram) -> None:
    transport = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    await transport.close()
    target = ReplyTarget(platform="telegram", scope="bot", chat_id="1")
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "x", idempotency_key="k")
    assert not caught.value.permanent


async def test_close_lets_an_in_flight_send_finish(fake: FakeTelegram) -> None:
    """The core stops adapters before draining deliveries: a send already on the wire must
    complete (cutting it off would leave an ambiguous, possibly posted reply)."""
    transport = TelegramTransport(TelegramBot(fake.token, base_url=fake.base_url))
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    await transport.open()
    fake.delay_next("sendMessage", 0.3)
    sending = asyncio.create_task(
        transport.send(target, "in flight", idempotency_key="k"), name="test-send"
    )
    await fake.wait_until(lambda: len(fake.calls("sendMessage")) == 1, what="the send")
    await transport.close()
    assert sending.done()
    assert (await sending).platform_message_id == str(fake.sent[0].message_id)
    with pytest.raises(DeliveryError) as caught:
        await transport.send(target, "after close", idempotency_key="k2")
    assert not caught.value.permanent and not caught.value.ambiguous


# --- pacing, format, wiring -----------------------------------------------------------------


def test_pace_per_chat_and_per_group(transport: TelegramTransport) -> None:
    group = ReplyTarget(platform="telegram", scope="bot", chat_id="-1001", thread_id="5")
    private = ReplyTarget(platform="telegram", scope="bot", chat_id="42")
    assert list(transport.pace(group)) == [
        PaceRule("chat:-1001", 1.0, BURST),
        PaceRule("group:-1001", 3.0, BURST),
    ]
    assert list(transport.pace(private)) == [PaceRule("chat:42", 1.0, BURST)]
    # one part rendered to its outbox row: text plus entities
    # (tests/unit/adapters/telegram/test_markdown.py)
    assert json.loads(transport.format("**bold** _x_")) == {
        "text": "bold x",
        "entities": [
            {"type": "bold", "offset": 0, "length": 4},
            {"type": "italic", "offset": 5, "length": 1},
        ],
    }
    assert transport.idempotent is False


async def test_adapter_transport_is_usable_before_start(
    fake: FakeTelegram, start_adapter: AdapterFactory
) -> None:
    """Deliveries left from before a restart may be sent before the adapter started."""
    adapter: TelegramAdapter = await start_adapter(start=False)
    chat = fake.private(fake.user())
    target = target_of(fake, fake.user_says(chat, "hi"))
    await adapter.transport.send(target, "late answer", idempotency_key="k")
    assert [s.text for s in fake.sent_to(chat)] == ["late answer"]


@pytest.mark.parametrize("ptb_timedelta", ["true", "false", None])
@pytest.mark.parametrize("given", [7, 2.5, dtm.timedelta(seconds=3)])
def test_retry_after_is_read_through_the_public_attribute_without_a_warning(
    monkeypatch: pytest.MonkeyPatch, ptb_timedelta: str | None, given: int | float | dtm.timedelta
) -> None:
    if ptb_timedelta is None:
        monkeypatch.delenv("PTB_TIMEDELTA", raising=False)
    else:
        monkeypatch.setenv("PTB_TIMEDELTA", ptb_timedelta)
    with warnings.catch_warnings():
        # PTB's own constructor reads the property (and warns without PTB_TIMEDELTA)
        warnings.simplefilter("ignore")
        exc = RetryAfter(given)  # type: ignore[arg-type]  # PTB 22 takes a float too
    expected = given.total_seconds() if isinstance(given, dtm.timedelta) else float(given)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning from our read fails the test
        assert retry_after_seconds(exc) == expected
        assert translate_error(exc).retry_after == expected
