"""The Slack transport's previews on Slack's own streaming methods, against the fake Slack's
Web API: where they are used, what a refusal does and how long it is remembered, a rewritten
text, a stream Slack closed, and the final edit of a stream a dead run left."""

from __future__ import annotations

from dataclasses import replace

import pytest

from adapters.slack import streams
from adapters.slack.blocks import feedback_block
from adapters.slack.extract import RECIPIENT
from adapters.slack.transport import SlackTransport, make_web_client, translate_error
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, TEAM_ID, FakeSlack


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def transport_for(fake: FakeSlack, clock: Clock | None = None) -> SlackTransport:
    transport = SlackTransport(make_web_client(token=BOT_TOKEN, base_url=fake.api_url, timeout=5))
    if clock is not None:
        transport.streams = streams.NativeStreams(transport.client, translate_error, clock=clock)
    return transport


def asked(fake: FakeSlack, channel: str = "C0GENERAL") -> ReplyTarget:
    root, _ = fake.seed_thread(channel, [], root_text="tell me")
    return ReplyTarget(
        platform="slack",
        scope=TEAM_ID,
        chat_id=channel,
        thread_id=root,
        extra={RECIPIENT: HUMAN},
    )


async def test_a_preview_streams_grows_and_ends_as_the_edited_final_text(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    target = asked(fake)
    ts = await transport.send_preview(target, "Hello")
    await transport.edit_preview(target, ts, "Hello wor")
    await transport.edit_preview(target, ts, "Hello wor")  # nothing new: no call
    await transport.edit_preview(target, ts, "Hello world")
    [message] = fake.bot_posts("C0GENERAL")
    assert (message.text, message.streaming, message.thread_ts) == (
        "Hello world",
        True,
        target.thread_id,
    )
    assert [c[3] for c in fake.stream_calls] == ["Hello", " wor", "ld"]
    await transport.edit_preview(target, ts, "Hello *world*", final=True)
    assert not message.streaming and message.text == "Hello *world*"
    assert message.blocks is not None and message.blocks[-1] == feedback_block()
    assert [c[0] for c in fake.stream_calls][-1] == "chat.stopStream"
    assert fake.calls_to("chat.postMessage") == []


async def test_a_rewritten_text_stops_the_stream_and_edits_the_message(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    target = asked(fake)
    ts = await transport.send_preview(target, "First try")
    await transport.edit_preview(target, ts, "Second")  # not a continuation: stop, then edit
    [message] = fake.bot_posts("C0GENERAL")
    assert (message.text, message.streaming) == ("Second", False)
    await transport.edit_preview(target, ts, "Second and more")
    assert message.text == "Second and more"
    assert [c[0] for c in fake.stream_calls] == ["chat.startStream", "chat.stopStream"]


async def test_a_stream_slack_closed_goes_on_by_edits(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    target = asked(fake)
    ts = await transport.send_preview(target, "Hello")
    fake.fail_next("chat.appendStream", error="message_not_in_streaming_state")
    fake.bot_posts("C0GENERAL")[0].streaming = False  # Slack ended it after a while
    await transport.edit_preview(target, ts, "Hello world")
    assert fake.bot_posts("C0GENERAL")[0].text == "Hello world"


@pytest.mark.parametrize(
    ("error", "everywhere"),
    [("unknown_method", True), ("missing_scope", True), ("channel_type_not_supported", False)],
)
async def test_a_refusal_falls_back_to_edits_and_is_remembered_for_a_while(
    fake: FakeSlack, error: str, everywhere: bool
) -> None:
    fake.add_channel("C0OTHER")
    clock = Clock()
    transport = transport_for(fake, clock)
    target = asked(fake)
    fake.refuse_streaming = error
    ts = await transport.send_preview(target, "Hello")
    await transport.edit_preview(target, ts, "Hello world")
    await transport.edit_preview(target, ts, "Hello world!", final=True)
    [message] = fake.bot_posts("C0GENERAL")
    assert message.text == "Hello world!" and len(fake.calls_to("chat.postMessage")) == 1
    fake.refuse_streaming = None
    # remembered: this channel (and with the method refused, every channel) does not try
    assert not transport.streams.allowed(target)
    assert transport.streams.allowed(asked(fake, "C0OTHER")) is not everywhere
    clock.now += streams.REFUSAL_MEMORY_SECONDS + 1
    assert transport.streams.allowed(target)
    assert len(fake.calls_to("chat.startStream")) == 1


async def test_streams_only_in_a_thread_and_outside_a_dm_only_to_a_named_recipient(
    fake: FakeSlack,
) -> None:
    transport = transport_for(fake)
    target = asked(fake)
    assert transport.streams.allowed(target)
    assert not transport.streams.allowed(replace(target, thread_id=None))
    assert not transport.streams.allowed(replace(target, extra={}))
    dm = ReplyTarget(platform="slack", scope=TEAM_ID, chat_id="D0DM", thread_id="1.2")
    assert transport.streams.allowed(dm)  # a DM needs no recipient


async def test_a_final_edit_after_a_crash_stops_the_dead_runs_stream_first(
    fake: FakeSlack,
) -> None:
    target = asked(fake)
    dead = transport_for(fake)
    ts = await dead.send_preview(target, "Half an ans")
    # a new process: it knows the preview's ts from the store, not the stream
    takeover = transport_for(fake)
    await takeover.edit_preview(target, ts, "Half an answer, whole now.", final=True)
    [message] = fake.bot_posts("C0GENERAL")
    assert (message.text, message.streaming) == ("Half an answer, whole now.", False)
    # done again (a retried delivery): the stream is over, the edit is the same
    await transport_for(fake).edit_preview(target, ts, "Half an answer, whole now.", final=True)
    assert len(fake.bot_posts("C0GENERAL")) == 1


async def test_a_deleted_preview_is_stopped_then_deleted(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    target = asked(fake)
    ts = await transport.send_preview(target, "Going")
    await transport.delete_preview(target, ts)
    assert fake.bot_posts("C0GENERAL") == []
    assert fake.deleted == [("C0GENERAL", ts)]


async def test_a_rate_limited_start_is_a_429_for_the_streamer(fake: FakeSlack) -> None:
    transport = transport_for(fake)
    target = asked(fake)
    fake.fail_next("chat.startStream", status=429, retry_after=2)
    with pytest.raises(DeliveryError) as raised:
        await transport.send_preview(target, "Hello")
    assert raised.value.retry_after == 2
    assert transport.streams.allowed(target)  # not a refusal
