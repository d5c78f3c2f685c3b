"""Events API over HTTP: the fake signs and POSTs exactly as Slack does to the adapter's route on
a real HTTP server; a recording Intake stands in for the core (stage 1)."""

from __future__ import annotations

import json
import time

import pytest

from adapters.slack import SlackAdapter
from gateway.core.domain import Envelope, EventKind, Trigger
from gateway.core.errors import ConfigError
from testsupport.fakes.slack import HUMAN, FakeSlack, wait_until
from testsupport.harness import RecordingIntake
from testsupport.slack import load_payload, running_adapter, serve_routes, slack_settings


async def test_top_level_mention_arrives_twice_with_one_message_id(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake):
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> hello there")
    assert [d.attempts[0].status for d in posted.deliveries] == [200, 200]
    mention, message = intake.envelopes
    assert mention.event_id != message.event_id
    assert {mention.event_id, message.event_id} == {d.event_id for d in posted.deliveries}
    # what the core's inbox dedupes on: (chat, message_id)
    assert (mention.key, mention.message_id) == (message.key, message.message_id)
    assert mention.key.thread_id == posted.ts == mention.target.thread_id
    assert mention.key.scope == fake.team_id
    assert mention.trigger is Trigger.ALWAYS
    assert mention.text == "hello there"
    assert intake.submitted[0].raw == posted.deliveries[0].payload


async def test_url_verification_is_answered_with_the_challenge(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    body = json.dumps(load_payload("slack_url_verification.docs.json")).encode()
    async with running_adapter(fake, intake):
        status, answer = await fake.post_raw(body, fake.sign(body))
    assert status == 200
    assert json.loads(answer) == {
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    }
    assert intake.submitted == []


@pytest.mark.parametrize(
    "tamper",
    [
        "bad-signature",
        "non-ascii-signature",
        "stale",
        "future",
        "missing-headers",
        "non-numeric-ts",
        "body-changed",
    ],
)
async def test_bad_or_stale_signature_is_401_and_nothing_is_stored(
    fake: FakeSlack, intake: RecordingIntake, tamper: str
) -> None:
    body = json.dumps(
        fake.wrap(
            {
                "type": "app_mention",
                "channel": "C0GENERAL",
                "user": HUMAN,
                "text": "<@U0BOT> hi",
                "ts": fake.next_ts(),
            }
        )
    ).encode()
    headers = fake.sign(body)
    if tamper == "bad-signature":
        headers["X-Slack-Signature"] = "v0=" + "0" * 64
    elif tamper == "non-ascii-signature":
        # was a 500: compare_digest raises TypeError on non-ASCII str
        headers["X-Slack-Signature"] = "v0=" + "é" * 64
    elif tamper == "stale":
        headers = fake.sign(body, timestamp=int(time.time()) - 301)  # 5-minute window
    elif tamper == "future":
        headers = fake.sign(body, timestamp=int(time.time()) + 330)  # clock skew
    elif tamper == "missing-headers":
        headers = {}
    elif tamper == "non-numeric-ts":
        headers["X-Slack-Request-Timestamp"] = "soon"
    elif tamper == "body-changed":
        body = body.replace(b"hi", b"ho")
    async with running_adapter(fake, intake):
        status, _ = await fake.post_raw(body, headers)
        assert status == 401
    assert intake.submitted == []
    assert intake.knows_calls == []


async def test_signature_within_the_window_is_accepted(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    body = json.dumps(fake.wrap({"type": "reaction_added", "user": HUMAN})).encode()
    async with running_adapter(fake, intake):
        status, _ = await fake.post_raw(body, fake.sign(body, timestamp=int(time.time()) - 290))
    assert status == 200
    assert len(intake.ignored) == 1


async def test_malformed_json_is_400_and_recorded_as_rejected(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    body = b'{"type": "event_callback", "event": '
    async with running_adapter(fake, intake):
        status, _ = await fake.post_raw(body, fake.sign(body))
    assert status == 400
    (rejected,) = intake.rejected
    assert "JSON" in rejected.reason
    assert intake.submitted[0].raw == {"body": body.decode()}


async def test_unusable_event_is_a_dead_letter_answered_400(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    body = json.dumps(fake.wrap({"type": "message", "user": HUMAN, "text": "no ts"})).encode()
    async with running_adapter(fake, intake):
        status, answer = await fake.post_raw(body, fake.sign(body))
    assert status == 400
    (rejected,) = intake.rejected
    assert json.loads(answer) == {"error": rejected.reason}


async def test_every_event_type_gets_a_2xx(fake: FakeSlack, intake: RecordingIntake) -> None:
    async with running_adapter(fake, intake):
        for event in (
            {"type": "reaction_added", "user": HUMAN, "reaction": "+1"},
            {"type": "member_joined_channel", "user": HUMAN, "channel": "C0GENERAL"},
            {"type": "app_home_opened", "user": HUMAN},
        ):
            delivery = await fake.deliver(fake.wrap(event))
            assert [a.status for a in delivery.attempts] == [200]
        delivery = await fake.deliver({"type": "app_rate_limited", "team_id": fake.team_id})
        assert [a.status for a in delivery.attempts] == [200]
    assert len(intake.ignored) == 4


async def test_slow_store_means_slack_retries_and_both_carry_the_same_event_id(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    """200 only after submit returned: a store slower than Slack's window makes Slack retry
    (the core dedupes the retry on event_id)."""
    fake.http_ack_timeout = 0.5
    intake.delays = [1.0]  # only the first submit is slow
    async with running_adapter(fake, intake):
        (delivery,) = (await fake.user_posts("D0DM", "hi")).deliveries
        await wait_until(lambda: len(intake.envelopes) == 2, what="the late first submit")
    assert [(a.retry_num, a.status, a.reason) for a in delivery.attempts] == [
        (0, None, ""),
        (1, 200, "http_timeout"),
    ]
    first, retry = intake.envelopes
    assert first.event_id == retry.event_id == delivery.event_id
    assert first.message_id == retry.message_id


async def test_store_failure_answers_503_and_the_retry_is_stored(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    intake.fail_next = 1
    async with running_adapter(fake, intake):
        (delivery,) = (await fake.user_posts("D0DM", "hi")).deliveries
    assert [a.status for a in delivery.attempts] == [503, 200]
    (stored,) = intake.envelopes
    assert stored.event_id == delivery.event_id


async def test_dm_is_one_session_answered_in_the_dm(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    async with running_adapter(fake, intake):
        first = await fake.user_posts("D0DM", "hello")
        await fake.user_posts("D0DM", "again")
        in_thread = await fake.user_posts("D0DM", "threaded", thread_ts=first.ts)
    a, b, c = [e for e in intake.envelopes if not e.backfill]
    assert a.key == b.key and a.key.thread_id is None and a.target.thread_id is None
    assert a.trigger is b.trigger is Trigger.ALWAYS
    assert c.key.thread_id == first.ts == c.target.thread_id != in_thread.ts
    # a DM thread is a new session: its root is backfilled as context on first contact
    (root,) = [e for e in intake.envelopes if e.backfill]
    assert (root.message_id, root.key) == (first.ts, c.key)


async def test_own_messages_and_message_replied_are_ignored(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    fake.emit_message_replied = True
    async with running_adapter(fake, intake) as adapter:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> start")
        from gateway.core.domain import ReplyTarget

        await adapter.transport.send(
            ReplyTarget(
                platform="slack", scope=fake.team_id, chat_id="C0GENERAL", thread_id=root.ts
            ),
            "bot answer",
            idempotency_key="k",
        )
        await wait_until(
            lambda: any(i.reason == "own message" for i in intake.ignored),
            what="the echo of the bot's own post",
        )
        reply = await fake.user_posts("C0GENERAL", "thanks", thread_ts=root.ts)
    # the reply produced its message event and the hidden message_replied notification
    assert len(reply.deliveries) == 2
    reasons = [i.reason for i in intake.ignored]
    assert reasons.count("own message") == 1
    assert reasons.count("hidden notification") >= 1
    # envelopes: mention twice (app_mention+message) and the follow-up; nothing for the bot
    assert [e.message_id for e in intake.envelopes] == [root.ts, root.ts, reply.ts]
    assert intake.envelopes[-1].trigger is Trigger.IF_FOLLOWING


async def test_edits_deletes_and_joins(fake: FakeSlack, intake: RecordingIntake) -> None:
    async with running_adapter(fake, intake):
        posted = await fake.user_posts("D0DM", "typo")
        await fake.user_edits("D0DM", posted.ts, "fixed")
        await fake.user_deletes("D0DM", posted.ts)
        await fake.user_joins("C0GENERAL", "U0NEW")
    message, edit, delete = intake.envelopes
    assert (edit.kind, edit.message_id, edit.text) == (EventKind.EDIT, posted.ts, "fixed")
    assert (delete.kind, delete.message_id) == (EventKind.DELETE, posted.ts)
    assert edit.key == delete.key == message.key
    assert [i.reason for i in intake.ignored] == ["subtype channel_join"]


async def test_routes_answer_503_until_started(fake: FakeSlack) -> None:
    adapter = SlackAdapter(slack_settings(fake))
    async with serve_routes(list(adapter.http_routes())) as base:
        fake.events_url = f"{base}/slack/events"
        body = json.dumps(fake.wrap({"type": "reaction_added"})).encode()
        status, _ = await fake.post_raw(body, fake.sign(body))
    assert status == 503


async def test_bad_token_fails_start_with_a_config_error(fake: FakeSlack) -> None:
    adapter = SlackAdapter(slack_settings(fake, SLACK_BOT_TOKEN="xoxb-wrong"))
    with pytest.raises(ConfigError) as info:
        await adapter.start(RecordingIntake())
    assert info.value.setting == "SLACK_BOT_TOKEN"
    assert "invalid_auth" in str(info.value)
    assert "xoxb-wrong" not in str(info.value)
    await adapter.stop()


async def test_socket_mode_only_serves_no_http_route(fake: FakeSlack) -> None:
    adapter = SlackAdapter(
        slack_settings(fake, SLACK_SIGNING_SECRET=None, SLACK_APP_TOKEN=fake.app_token)
    )
    assert list(adapter.http_routes()) == []


# --- thread history on first contact ---------------------------------------------------------


async def test_mid_thread_mention_backfills_the_earlier_messages_first(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    root, replies = fake.seed_thread(
        "C0GENERAL",
        [("U0ANN", "first reply"), ("U0BOB", "second reply")],
        root_text="the original question",
    )
    async with running_adapter(fake, intake):
        mention = await fake.user_posts("C0GENERAL", "<@U0BOT> summarize", thread_ts=root)
    envelopes = intake.envelopes
    backfill = [e for e in envelopes if e.backfill]
    assert [e.message_id for e in backfill] == [root, *replies]
    assert [e.text for e in backfill] == ["the original question", "first reply", "second reply"]
    for e in backfill:
        assert e.trigger is Trigger.NEVER and e.event_id is None
        assert e.key.thread_id == root
    # history first, then the mention (app_mention), then its duplicate message event
    assert envelopes.index(backfill[-1]) < envelopes.index(
        next(e for e in envelopes if e.message_id == mention.ts)
    )
    live = [e for e in envelopes if not e.backfill]
    assert [e.message_id for e in live] == [mention.ts, mention.ts]
    assert all(e.key.thread_id == root and e.target.thread_id == root for e in live)
    # one history fetch: the second event found the session known
    (replies_call,) = fake.calls_to("conversations.replies")
    assert replies_call.params["ts"] == root


async def test_backfill_pages_through_long_threads(
    fake: FakeSlack, intake: RecordingIntake, monkeypatch: pytest.MonkeyPatch
) -> None:
    import adapters.slack.ingest as slack_ingest

    monkeypatch.setattr(slack_ingest, "_BACKFILL_PAGE", 2)
    root, replies = fake.seed_thread(
        "C0GENERAL", [(HUMAN, f"r{i}") for i in range(5)], root_text="root"
    )
    async with running_adapter(fake, intake):
        await fake.user_posts("C0GENERAL", "<@U0BOT> hi", thread_ts=root)
    assert [e.message_id for e in intake.envelopes if e.backfill] == [root, *replies]
    # 7 messages in the thread now (root, 5 replies, the mention): 4 pages of 2
    assert len(fake.calls_to("conversations.replies")) == 4


async def test_known_thread_is_not_backfilled(fake: FakeSlack, intake: RecordingIntake) -> None:
    async with running_adapter(fake, intake):
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> start")
        await fake.user_posts("C0GENERAL", "<@U0BOT> more", thread_ts=root.ts)
    assert fake.calls_to("conversations.replies") == []
    assert not any(e.backfill for e in intake.envelopes)


async def test_failed_history_fetch_still_stores_the_mention(
    fake: FakeSlack, intake: RecordingIntake
) -> None:
    root, _ = fake.seed_thread("C0GENERAL", [(HUMAN, "r")], root_text="root")
    fake.fail_next("conversations.replies", error="ratelimited", status=429, times=2)
    async with running_adapter(fake, intake):
        mention = await fake.user_posts("C0GENERAL", "<@U0BOT> hi", thread_ts=root)
    assert [e.message_id for e in intake.envelopes] == [mention.ts, mention.ts]
    assert all(isinstance(e, Envelope) and not e.backfill for e in intake.envelopes)
