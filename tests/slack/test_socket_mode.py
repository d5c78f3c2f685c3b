"""Socket Mode through slack_sdk's aiohttp SocketModeClient against the fake's WS endpoint."""

from __future__ import annotations

from benchmarks.fakes.slack import FakeSlack, wait_until
from tests.slack.conftest import running_adapter
from tests.support import RecordingIntake


async def test_envelopes_are_acked_only_after_submit_returned(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    intake.delay = 0.2  # a store that takes a moment
    async with running_adapter(fake, intake, socket_mode=True):
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> over the socket")
    assert [c.method for c in fake.calls_to("apps.connections.open")] == ["apps.connections.open"]
    assert (
        fake.calls_to("apps.connections.open")[0]
        .headers["Authorization"]
        .startswith("Bearer xapp-")
    )
    assert len(posted.deliveries) == 2
    by_event = {s.extracted.event_id: s for s in intake.submitted}
    for delivery in posted.deliveries:
        assert delivery.succeeded and delivery.ack_count == 1
        assert [a.retry_num for a in delivery.attempts] == [0]
        submitted = by_event[delivery.event_id]
        assert delivery.acked_at is not None and delivery.acked_at >= submitted.returned_at
    mention, message = intake.envelopes
    assert (mention.key, mention.message_id) == (message.key, message.message_id)
    assert mention.key.thread_id == posted.ts


async def test_unacked_envelope_is_redelivered_and_stored(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    fake.socket_ack_timeout = 0.5
    intake.fail_next = 1  # the store fails once: no ack, Slack redelivers
    async with running_adapter(fake, intake, socket_mode=True):
        (delivery,) = (await fake.user_posts("D0DM", "hello")).deliveries
    assert [(a.retry_num, a.status, a.reason) for a in delivery.attempts] == [
        (0, None, ""),
        (1, 200, "timeout"),
    ]
    (stored,) = intake.envelopes
    assert stored.event_id == delivery.event_id


async def test_slow_store_redelivery_carries_the_same_event_id(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    fake.socket_ack_timeout = 0.5
    intake.delays = [1.0]
    async with running_adapter(fake, intake, socket_mode=True):
        (delivery,) = (await fake.user_posts("D0DM", "hello")).deliveries
        await wait_until(lambda: len(intake.envelopes) == 2, what="the slow first submit")
        await wait_until(lambda: delivery.ack_count == 2, what="both acks")
    first, second = intake.envelopes
    assert first.event_id == second.event_id == delivery.event_id  # the core dedupes it


async def test_disconnect_reconnects_to_a_new_url_and_keeps_receiving(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake, socket_mode=True):
        await fake.user_posts("D0DM", "before")
        await fake.disconnect_sockets("refresh_requested")
        await wait_until(lambda: fake.socket_connections == 2, what="a second connection")
        await wait_until(lambda: len(fake.open_sockets()) == 1, what="the old socket closed")
        (delivery,) = (await fake.user_posts("D0DM", "after")).deliveries
    assert delivery.succeeded
    assert [e.text for e in intake.envelopes] == ["before", "after"]
    assert len(fake.calls_to("apps.connections.open")) == 2


async def test_non_event_envelopes_are_acked_and_recorded(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake, socket_mode=True):
        event = await fake.deliver(fake.wrap({"type": "reaction_added", "user": "U1"}))
        command = await fake.deliver(
            {"command": "/gateway", "text": "hi", "team_id": fake.team_id},
            envelope_type="slash_commands",
        )
    assert event.succeeded and command.succeeded
    assert [i.reason for i in intake.ignored] == [
        "event type reaction_added",
        "socket mode slash_commands",
    ]
