"""Long polling: the offset passes an update only after ``intake.submit`` returned for it
(ack after durable ingest), unconfirmed updates are redelivered, errors back off, and bad
updates never wedge the loop."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from structlog.testing import capture_logs

from gateway.core.commands import COMMANDS
from gateway.core.domain import Envelope, Ignored, Rejected, Trigger
from gateway.core.errors import ConfigError
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import RecordingIntake
from testsupport.telegram import AdapterFactory


async def test_start_registers_commands_and_never_drops_pending(
    fake: FakeTelegram, start_adapter: AdapterFactory
) -> None:
    chat = fake.private(fake.user())
    fake.user_says(chat, "sent while the gateway was down")
    adapter = await start_adapter()
    assert adapter.identity is not None and adapter.identity.id == fake.bot.id
    assert [c["command"] for c in fake.commands] == list(COMMANDS)
    [delete] = fake.calls("deleteWebhook")
    assert delete.params.get("drop_pending_updates", "false") == "false"
    assert adapter.http_routes() == []  # polling mode serves no webhook
    await fake.wait_until(
        lambda: len(fake.sent) == 0 and len(fake.confirmed) == 1,
        what="the old update to be ingested and confirmed",
    )


async def test_updates_are_submitted_in_order_with_raw_payload(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    await start_adapter()
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    first = fake.user_says(forum, "one @GatewayTestBot", topic=topic)
    second = fake.user_says(forum, "two")
    await fake.wait_until(lambda: len(intake.submitted) == 3, what="3 submits")
    created, one, two = intake.extracted
    assert isinstance(created, Ignored) and "forum_topic_created" in created.reason
    assert isinstance(one, Envelope) and isinstance(two, Envelope)
    assert one.message_id == str(first["message_id"]) and one.key.thread_id == str(topic)
    assert one.trigger is Trigger.ALWAYS
    assert two.message_id == str(second["message_id"]) and two.key.thread_id is None
    raw = intake.submitted[1].raw
    assert raw is not None and raw["message"]["text"] == "one @GatewayTestBot"
    assert one.event_id == str(raw["update_id"])


async def test_offset_is_not_confirmed_until_submit_returned(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    intake.gate = asyncio.Event()
    await start_adapter()
    chat = fake.private(fake.user())
    fake.user_says(chat, "hello")
    [update_id] = fake.pending_update_ids()
    await fake.wait_until(lambda: intake.in_submit == 1, what="submit in flight")
    # the adapter holds the update, its submit has not returned: Telegram must still have it
    assert fake.confirmed == []
    assert fake.pending_update_ids() == [update_id]
    polls_before = len(fake.calls("getUpdates"))
    intake.gate.set()
    await fake.wait_until(lambda: fake.confirmed == [update_id], what="confirmation")
    # confirmed by the next getUpdates call carrying offset = update_id + 1
    confirming = fake.calls("getUpdates")[polls_before]
    assert confirming.params["offset"] == str(update_id + 1)
    assert fake.deliveries[update_id] == 1


async def test_failed_submit_means_the_update_is_redelivered(
    fake: FakeTelegram, start_adapter: AdapterFactory
) -> None:
    flaky = RecordingIntake(fail_next=1)  # the database is down for the first submit
    await start_adapter(intake_=flaky)
    chat = fake.private(fake.user())
    fake.user_says(chat, "must not be lost")
    [update_id] = fake.pending_update_ids()
    await fake.wait_until(lambda: len(flaky.submitted) == 1, what="the retried submit")
    assert flaky.attempts == 2
    assert fake.deliveries[update_id] == 2  # Telegram redelivered it
    [envelope] = flaky.envelopes
    assert envelope.text == "must not be lost"
    await fake.wait_until(lambda: fake.confirmed == [update_id], what="confirmation")


async def test_failure_mid_batch_keeps_the_earlier_updates_confirmed(
    fake: FakeTelegram, start_adapter: AdapterFactory
) -> None:
    chat = fake.private(fake.user())
    for text in ("a", "b", "c"):
        fake.user_says(chat, text)
    ids = fake.pending_update_ids()

    class FailSecond(RecordingIntake):
        async def submit(self, extracted, *, raw):
            if self.attempts == 1:
                self.attempts += 1
                raise RuntimeError("transient (test)")
            return await super().submit(extracted, raw=raw)

    flaky = FailSecond()
    await start_adapter(intake_=flaky)
    await fake.wait_until(lambda: len(flaky.submitted) == 3, what="all three")
    assert [e.text for e in flaky.envelopes] == ["a", "b", "c"]
    assert fake.deliveries[ids[0]] == 1  # a was not redelivered: its offset had moved
    assert fake.deliveries[ids[1]] == 2
    await fake.wait_until(lambda: fake.confirmed == ids, what="confirmation")


async def test_unparseable_and_unknown_updates_do_not_wedge_the_loop(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    await start_adapter()
    fake.push({"message": {"message_id": 1, "date": 1, "text": "no chat"}})
    fake.push(
        {
            "channel_post": {
                "message_id": 2,
                "date": 1,
                "text": "news",
                "chat": {"id": -1009, "type": "channel", "title": "N"},
            }
        }
    )
    fake.push(
        {
            "message": {
                "message_id": 3,
                "text": "PTB could not even parse this",
                "chat": {"id": 5, "type": "private"},
                "from": {"id": 5, "is_bot": False, "first_name": "E"},
            }
        }
    )
    chat = fake.private(fake.user())
    fake.user_says(chat, "still alive?")
    await fake.wait_until(lambda: len(intake.submitted) == 4, what="4 submits")
    rejected, channel, no_date, alive = intake.extracted
    assert isinstance(rejected, Rejected) and "chat" in rejected.reason
    assert isinstance(channel, Ignored) and "channel_post" in channel.reason
    assert isinstance(no_date, Envelope) and no_date.sent_at is None
    assert isinstance(alive, Envelope) and alive.text == "still alive?"
    assert rejected.event_id is not None
    await fake.wait_until(lambda: fake.pending_update_ids() == [], what="all confirmed")


async def test_own_messages_and_edits(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    await start_adapter()
    forum = fake.forum()
    topic = fake.create_topic(forum, "A")
    asked = fake.user_says(forum, "typo", topic=topic)
    fake.user_edits(forum, asked, "fixed")
    fake.user_says(forum, "I am the bot", topic=topic, user=fake.bot)
    await fake.wait_until(lambda: len(intake.submitted) == 4, what="4 submits")
    _, _, edit, own = intake.extracted
    assert isinstance(edit, Envelope) and edit.kind.value == "edit"
    assert edit.message_id == str(asked["message_id"]) and edit.text == "fixed"
    assert isinstance(own, Ignored) and own.reason == "own message"


async def test_conflict_is_logged_and_polling_continues(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    fake.fail_next(
        "getUpdates",
        status=409,
        description="Conflict: terminated by other "
        "getUpdates request; make sure that only one bot instance is running",
    )
    with capture_logs() as logs:
        await start_adapter()
        chat = fake.private(fake.user())
        fake.user_says(chat, "hi")
        await fake.wait_until(lambda: len(intake.submitted) == 1, what="the update after 409")
    conflicts = [e for e in logs if e["event"] == "telegram_polling_conflict"]
    assert conflicts and conflicts[0]["log_level"] == "error"
    assert "only one poller" in conflicts[0]["hint"]
    assert fake.token not in repr(logs)


async def test_second_poller_gets_409_from_the_fake(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    """Two gateways polling one token: both keep going, both see 409s, nothing is lost."""
    other = RecordingIntake()
    with capture_logs() as logs:
        await start_adapter()
        await start_adapter(intake_=other)
        chat = fake.private(fake.user())
        fake.user_says(chat, "who gets me?")
        await fake.wait_until(
            lambda: (
                any(e["event"] == "telegram_polling_conflict" for e in logs)
                and len(intake.submitted) + len(other.submitted) >= 1
            ),
            what="a conflict and the update",
        )


async def test_flood_control_on_get_updates_waits(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    fake.flood_next("getUpdates", retry_after=1)
    await start_adapter()
    chat = fake.private(fake.user())
    fake.user_says(chat, "hi")
    await fake.wait_until(lambda: len(intake.submitted) == 1, what="ingest after 429")
    first, second = fake.calls("getUpdates")[:2]
    assert second.at - first.at >= 0.9


async def test_network_errors_back_off_and_recover(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    fake.fail_next("getUpdates", times=3, status=502, description="Bad Gateway")
    await start_adapter()
    chat = fake.private(fake.user())
    fake.user_says(chat, "hi")
    await fake.wait_until(lambda: len(intake.submitted) == 1, what="ingest after 502s")
    calls = fake.calls("getUpdates")
    gaps = [b.at - a.at for a, b in itertools.pairwise(calls[:4])]
    # backoff 0.02 s doubling per failure: the third wait is at least 0.08 s, not a hot loop
    assert gaps[0] >= 0.015 and gaps[2] >= 0.075


async def test_stop_during_long_poll_is_prompt_and_confirms(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    adapter = await start_adapter()
    chat = fake.private(fake.user())
    fake.user_says(chat, "hi")
    await fake.wait_until(lambda: len(intake.submitted) == 1, what="ingest")
    loop = asyncio.get_running_loop()
    began = loop.time()
    await adapter.stop()
    assert loop.time() - began < 1.0
    assert fake.pending_update_ids() == []


async def test_stop_waits_for_an_in_flight_submit(
    fake: FakeTelegram, start_adapter: AdapterFactory, intake: RecordingIntake
) -> None:
    intake.gate = asyncio.Event()
    adapter = await start_adapter()
    chat = fake.private(fake.user())
    fake.user_says(chat, "hi")
    await fake.wait_until(lambda: intake.in_submit == 1, what="submit in flight")
    stopping = asyncio.create_task(adapter.stop(), name="test-stop")
    await asyncio.sleep(0)
    assert not stopping.done()
    intake.gate.set()
    await asyncio.wait_for(stopping, timeout=5)
    assert len(intake.submitted) == 1
    assert fake.pending_update_ids() == []  # confirmed on the way out


async def test_restart_after_crash_redelivers_unconfirmed(
    fake: FakeTelegram, start_adapter: AdapterFactory
) -> None:
    """A crash before submit returned: the update stays at Telegram and the next process
    gets it (the inbox dedupes if it was in fact stored)."""
    stuck = RecordingIntake()
    stuck.gate = asyncio.Event()  # never opened: the "process" dies inside submit
    crashed = await start_adapter(intake_=stuck)
    chat = fake.private(fake.user())
    fake.user_says(chat, "during the crash")
    await fake.wait_until(lambda: stuck.in_submit == 1, what="submit in flight")
    assert crashed._poll_task is not None
    crashed._poll_task.cancel()  # simulated SIGKILL: no graceful stop, no confirmation
    await asyncio.gather(crashed._poll_task, return_exceptions=True)
    crashed._poll_task = None
    fresh = RecordingIntake()
    await start_adapter(intake_=fresh)
    await fake.wait_until(lambda: len(fresh.submitted) == 1, what="redelivery")
    assert fresh.envelopes[0].text == "during the crash"


async def test_bad_token_is_a_config_error(
    fake: FakeTelegram, start_adapter: AdapterFactory
) -> None:
    with pytest.raises(ConfigError) as caught:
        await start_adapter(TELEGRAM_BOT_TOKEN="999:wrong")
    assert caught.value.setting == "TELEGRAM_BOT_TOKEN"
    assert "999:wrong" not in str(caught.value)
