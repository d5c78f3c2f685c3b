"""The websocket client and the adapter's receive side against the fake server: auth, handler
isolation, reconnects with backoff, reconciliation of posts missed while disconnected, cursors
across restarts, edits/deletes, typing, noise filtering."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from adapters.mattermost.adapter import MattermostAdapter
from adapters.mattermost.websocket import AuthenticationFailed, Backoff, EventStream
from gateway.core.domain import Envelope, EventKind, Extracted, ReplyTarget, Trigger
from gateway.core.errors import ConfigError
from gateway.inbound.policy import AnswerRules
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import RecordingIntake
from testsupport.mattermost import FAST_BACKOFF, connected, load_payload, make_config, wait_until


async def start(
    fake: FakeMattermost, running: Any, intake: RecordingIntake | None = None, **overrides: Any
) -> tuple[MattermostAdapter, RecordingIntake]:
    # the core's door with Mattermost's words ("own post")
    intake = intake or RecordingIntake(rules=AnswerRules(chat_word="channel", own_word="post"))
    adapter = MattermostAdapter(make_config(fake, **overrides))
    await running(adapter, intake)
    await connected(adapter)
    return adapter, intake


def has_text(intake: RecordingIntake, text: str) -> bool:
    return any(e.text == text for e in intake.envelopes)


# --- connecting and authenticating ------------------------------------------------------------


async def test_connects_with_bearer_header(fake: FakeMattermost, running: Any) -> None:
    adapter, _ = await start(fake, running)
    assert fake.connections_total == 1 and fake.live_connections == 1
    assert adapter.identity is not None and adapter.identity.user_id == fake.bot.id
    assert adapter.stream is not None and adapter.stream.connection_id
    # the challenge is also sent (same shape as the documented one) and, the header having
    # authenticated the socket, ignored by the server like the real router does
    challenge = load_payload("mattermost_ws_authentication_challenge.docs.json")
    sent = fake.ws_actions[0]
    assert sent.keys() == challenge.keys() and sent["action"] == "authentication_challenge"
    assert sent["seq"] == 1 and sent["data"] == {"token": fake.bot.token}


async def test_challenge_flow_when_a_proxy_strips_the_header(running: Any) -> None:
    async with FakeMattermost(header_auth=False) as fake:
        adapter, intake = await start(fake, running)
        # the fake sent hello *before* the OK reply, as real servers do (mattermost#23710)
        post = await fake.user_posts(fake.dm_alice, "hi there")
        await wait_until(lambda: bool(intake.by_message(post["id"])), message="DM post")
        assert adapter.stream is not None and adapter.stream.connections == 1


async def test_bad_token_on_the_handshake_backs_off(fake: FakeMattermost) -> None:
    stream = _bare_stream(fake, token="wrong")
    task = asyncio.create_task(stream.run(), name="test-stream")
    try:
        await wait_until(lambda: fake.handshakes_refused >= 3, message="three refusals")
    finally:
        await stream.stop()
        await asyncio.wait_for(task, 5)
    assert stream.connections == 0
    assert isinstance(stream.last_error, InvalidStatus)
    assert stream.last_error.response.status_code == 401


async def test_bad_token_in_the_challenge_is_an_auth_failure(running: Any) -> None:
    async with FakeMattermost(header_auth=False) as fake:
        stream = _bare_stream(fake, token="wrong")
        task = asyncio.create_task(stream.run(), name="test-stream")
        try:
            # the server closes the socket on a bad challenge token; we back off and retry
            await wait_until(lambda: stream.attempts >= 2, message="a retry")
        finally:
            await stream.stop()
            await asyncio.wait_for(task, 5)
        assert isinstance(stream.last_error, AuthenticationFailed)
        assert stream.connections == 0


async def test_start_with_a_refused_token_names_the_setting(fake: FakeMattermost) -> None:
    adapter = MattermostAdapter(make_config(fake, token="wrong"))
    with pytest.raises(ConfigError) as info:
        await adapter.start(RecordingIntake())
    assert info.value.setting == "MATTERMOST_TOKEN"
    await adapter.stop()


async def test_server_down_at_start_does_not_fail_start(running: Any) -> None:
    fake = FakeMattermost()
    await fake.start()
    url = fake.url
    await fake.close()  # nothing listens on the port now
    adapter = MattermostAdapter(make_config(fake, url=url))
    await running(adapter, RecordingIntake())  # start() returns; the stream retries
    assert adapter.stream is not None
    await wait_until(
        lambda: adapter.stream is not None and adapter.stream.attempts >= 2, message="retries"
    )
    assert adapter.stream.connections == 0


# --- handler isolation --------------------------------------------------------------------------


async def test_exception_in_one_event_does_not_drop_the_connection(
    fake: FakeMattermost, running: Any
) -> None:
    def boom(e: Extracted) -> bool:
        return isinstance(e, Envelope) and e.text.endswith("boom")

    intake = RecordingIntake(fail=boom)
    adapter, _ = await start(fake, running, intake)
    bad = await fake.user_posts(fake.town_square, "boom", mention_bot=True)
    good = await fake.user_posts(fake.town_square, "fine", mention_bot=True)
    await wait_until(lambda: bool(intake.by_message(good["id"])), message="next event")
    assert fake.connections_total == 1  # same connection
    assert adapter.stream is not None and adapter.stream.connections == 1
    # the failure is a visible dead letter with the raw frame
    rejected = [(e, raw) for e, raw in intake.submitted if e in intake.rejected]
    # (a resync tick may have retried, and failed, once more before we repaired the intake)
    assert rejected and all("handler failed: RuntimeError" in e.reason for e, _ in rejected)
    assert rejected[0][1] is not None and rejected[0][1]["event"] == "posted"
    # ...and the post is not lost: once the intake works again, the idle tick re-fetches it
    intake.fail = None
    # a resync that failed above backs off 10 s (5 s * 2**1) before the next try
    await wait_until(
        lambda: bool(intake.by_message(bad["id"])), timeout=15.0, message="held post resync"
    )
    env = intake.by_message(bad["id"])[0]
    assert env.trigger is Trigger.ALWAYS and env.metadata["source"] == "reconcile"
    assert fake.connections_total == 1


async def test_non_json_frame_is_a_dead_letter(fake: FakeMattermost, running: Any) -> None:
    _, intake = await start(fake, running)
    await fake.push_raw("this is not json")
    post = await fake.user_posts(fake.dm_alice, "still here?")
    await wait_until(lambda: bool(intake.by_message(post["id"])), message="next post")
    assert [r.reason for r in intake.rejected] == ["websocket frame is not a JSON object"]
    assert fake.connections_total == 1


async def test_noisy_events_are_not_submitted(fake: FakeMattermost, running: Any) -> None:
    _, intake = await start(fake, running)
    await fake.push("typing", {"parent_id": "", "user_id": fake.alice.id}, channel=fake.town_square)
    await fake.push("status_change", {"status": "online", "user_id": fake.alice.id})
    await fake.push("channel_viewed", {"channel_id": fake.town_square.id})
    post = await fake.user_posts(fake.dm_alice, "hello")
    await wait_until(lambda: bool(intake.by_message(post["id"])), message="the post")
    assert [type(e).__name__ for e, _ in intake.submitted] == ["Envelope"]


# --- reconnects ----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [1000, 1006])
async def test_reconnects_after_server_close(fake: FakeMattermost, running: Any, code: int) -> None:
    adapter, intake = await start(fake, running)
    await fake.drop_connections(code)
    await connected(adapter, 2)
    assert adapter.stream is not None and len(adapter.stream.delays) == 1
    post = await fake.user_posts(fake.town_square, "after reconnect", mention_bot=True)
    await wait_until(lambda: bool(intake.by_message(post["id"])), message="post after")


async def test_backoff_grows_with_jitter_while_refused(fake: FakeMattermost, running: Any) -> None:
    backoff = Backoff(initial=0.02, factor=2.0, maximum=0.08, stable_after=60.0)
    adapter, _ = await start(fake, running, backoff=backoff)
    fake.fail_next("websocket", 503, count=4)
    await fake.drop_connections(1000)
    await connected(adapter, 2)
    assert adapter.stream is not None
    delays = adapter.stream.delays
    assert len(delays) == 5  # the close, then four refusals
    for failures, delay in enumerate(delays):
        ceiling = min(0.08, 0.02 * 2**failures)
        assert ceiling / 2 <= delay <= ceiling, (failures, delay)


@pytest.mark.parametrize(("stable_after", "reset"), [(0.05, True), (60.0, False)])
async def test_a_healthy_connection_resets_the_backoff_even_after_1006(
    fake: FakeMattermost, running: Any, stable_after: float, reset: bool
) -> None:
    backoff = Backoff(initial=0.02, factor=2.0, maximum=1.0, stable_after=stable_after)
    fake.fail_next("websocket", 503, count=3)  # three failures before the first success
    adapter, _ = await start(fake, running, backoff=backoff)
    await asyncio.sleep(0.1)  # stay connected past stable_after (0.05 s) in the reset case
    await fake.drop_connections(1006)
    await connected(adapter, 2)
    assert adapter.stream is not None
    last = adapter.stream.delays[-1]
    if reset:
        assert last <= 0.02  # back to the first step
    else:
        assert last >= 0.16 / 2  # the fourth step: three refusals, then this drop


def test_backoff_is_jittered_and_capped() -> None:
    b = Backoff(initial=1.0, factor=2.0, maximum=10.0)
    assert b.delay(0, rand=lambda: 0.0) == 0.5 and b.delay(0, rand=lambda: 1.0) == 1.0
    assert b.delay(3, rand=lambda: 0.5) == 6.0
    assert b.delay(20, rand=lambda: 1.0) == 10.0


async def test_reconciliation_finds_posts_created_during_the_gap(
    fake: FakeMattermost, running: Any
) -> None:
    _, intake = await start(fake, running)
    root = await fake.user_posts(fake.town_square, "before", mention_bot=True)
    await wait_until(lambda: bool(intake.by_message(root["id"])), message="live post")

    fake.refuse_websockets = 503
    await fake.drop_connections(1006)
    await wait_until(lambda: fake.live_connections == 0, message="disconnected")
    # nobody is connected: these are never pushed, only reconciliation can find them
    mention = await fake.user_posts(fake.town_square, "missed mention", mention_bot=True)
    reply = await fake.user_posts(fake.town_square, "missed reply", root_id=root["id"])
    dm = await fake.user_posts(fake.dm_alice, "missed dm")
    context = await fake.user_posts(fake.private, "missed chatter")
    gone = await fake.user_posts(fake.town_square, "deleted while away", mention_bot=True)
    await fake.delete_post(gone["id"])
    edited = await fake.edit_post(root["id"], "before (edited)")
    assert fake.live_connections == 0
    fake.refuse_websockets = None

    await wait_until(
        lambda: all(intake.by_message(p["id"]) for p in (mention, reply, dm, context)),
        message="reconciled posts",
    )
    by_id = {p["id"]: intake.by_message(p["id"])[-1] for p in (mention, reply, dm, context)}
    assert all(e.metadata["source"] == "reconcile" for e in by_id.values())
    assert by_id[mention["id"]].trigger is Trigger.ALWAYS
    assert by_id[mention["id"]].target.thread_id == mention["id"]
    assert by_id[reply["id"]].key.thread_id == root["id"]
    assert by_id[reply["id"]].target.thread_id == root["id"]
    assert by_id[reply["id"]].trigger is Trigger.IF_FOLLOWING
    assert by_id[dm["id"]].trigger is Trigger.ALWAYS and by_id[dm["id"]].key.thread_id is None
    assert by_id[context["id"]].trigger is Trigger.NEVER
    # deleted before we saw it: never a message to answer, only the deletion annotation
    assert [e.kind for e in intake.by_message(gone["id"])] == [EventKind.DELETE]
    edits = [e for e in intake.envelopes if e.kind is EventKind.EDIT]
    assert [(e.message_id, e.text) for e in edits] == [(root["id"], edited["message"])]
    # each missed post was submitted once by reconciliation (the inbox would dedupe more)
    assert all(len(intake.by_message(p["id"])) == 1 for p in (mention, reply, dm, context))


async def test_restart_reconciles_from_saved_cursors(fake: FakeMattermost, running: Any) -> None:
    history = await fake.user_posts(fake.town_square, "old history", mention_bot=True)
    first, intake = await start(fake, running)
    live = await fake.user_posts(fake.town_square, "live", mention_bot=True)
    await wait_until(lambda: bool(intake.by_message(live["id"])), message="live post")
    # a first start does not answer history from before the gateway existed
    assert not intake.by_message(history["id"])
    await first.stop()
    assert any(name.startswith(f"mattermost:{first.scope}:channel:") for name in intake.cursors)

    missed = await fake.user_posts(fake.town_square, "while restarting", mention_bot=True)
    joined = fake.add_channel("new-project", "O", members={fake.bot.id, fake.alice.id})
    in_new = await fake.user_posts(joined, "hello new channel", mention_bot=True)

    restarted = RecordingIntake(cursors=dict(intake.cursors))  # the durable cursor store
    await start(fake, running, restarted)
    await wait_until(
        lambda: bool(restarted.by_message(missed["id"]) and restarted.by_message(in_new["id"])),
        message="missed posts after restart",
    )
    assert not restarted.by_message(history["id"])
    # a channel joined while away is read from the newest cursor we had (the baseline)
    assert restarted.by_message(in_new["id"])[0].trigger is Trigger.ALWAYS


# --- edits, deletions, channel types --------------------------------------------------------------


async def test_edit_and_delete_are_annotations(fake: FakeMattermost, running: Any) -> None:
    _, intake = await start(fake, running)
    post = await fake.user_posts(fake.dm_alice, "typo")
    await fake.edit_post(post["id"], "fixed")
    await fake.delete_post(post["id"])
    await wait_until(lambda: len(intake.by_message(post["id"])) == 3, message="3 events")
    kinds = [(e.kind, e.text, e.trigger) for e in intake.by_message(post["id"])]
    assert kinds == [
        (EventKind.MESSAGE, "typo", Trigger.ALWAYS),
        (EventKind.EDIT, "fixed", Trigger.NEVER),
        (EventKind.DELETE, "", Trigger.NEVER),
    ]
    # post_edited carries no channel_type: the DM rule still applies (type remembered)
    assert {e.key.thread_id for e in intake.by_message(post["id"])} == {None}


async def test_edit_in_an_unknown_channel_looks_the_type_up(
    fake: FakeMattermost, running: Any
) -> None:
    adapter, intake = await start(fake, running)
    other = fake.add_dm(fake.bob)  # created after the listing: type unknown to the adapter
    post = await fake.user_posts(other, "hey", user=fake.bob)
    await wait_until(lambda: bool(intake.by_message(post["id"])), message="the post")
    adapter.reconciler._channel_types.clear()  # as if evicted from the bounded cache
    await fake.edit_post(post["id"], "hey!")
    await wait_until(lambda: len(intake.by_message(post["id"])) == 2, message="edit")
    assert intake.by_message(post["id"])[1].key.thread_id is None
    assert fake.requests_to("channel")


async def test_own_posts_are_ignored_but_advance_the_cursor(
    fake: FakeMattermost, running: Any
) -> None:
    adapter, intake = await start(fake, running)
    target = ReplyTarget(platform="mattermost", scope=adapter.scope, chat_id=fake.dm_alice.id)
    await adapter.transport.send(target, "from the bot", idempotency_key="own-1")
    await wait_until(lambda: bool(intake.ignored), message="own post event")
    assert intake.ignored[0].reason == "own post" and not intake.envelopes
    name = f"mattermost:{adapter.scope}:channel:{fake.dm_alice.id}"
    # saved by the read loop's next tick at the latest
    await wait_until(
        lambda: intake.cursors.get(name) == str(fake.bot_posts()[0]["create_at"]),
        message="cursor saved",
    )


class CountingIntake(RecordingIntake):
    """Counts the cursor writes (each one a transaction in the store)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.saves: list[tuple[str, str]] = []

    async def save_cursor(self, name: str, value: str) -> None:
        self.saves.append((name, value))
        await super().save_cursor(name, value)


async def test_a_busy_channels_cursor_is_saved_once_a_tick_not_once_a_post(
    fake: FakeMattermost, running: Any
) -> None:
    """A write per live post was a transaction per message: within a second a channel's
    cursor is saved once (the first move), and the read loop's tick saves the last one."""
    intake = CountingIntake(rules=AnswerRules(chat_word="channel", own_word="post"))
    adapter, _ = await start(fake, running, intake, tick_interval=0.5)
    name = f"mattermost:{adapter.scope}:channel:{fake.town_square.id}"
    before = len(intake.saves)
    posts = [await fake.user_posts(fake.town_square, f"busy {n}") for n in range(8)]
    await wait_until(lambda: all(has_text(intake, p["message"]) for p in posts), message="posts")
    await wait_until(
        lambda: intake.cursors.get(name) == str(posts[-1]["create_at"]),
        message="the last post's cursor saved by the tick",
    )
    writes = [value for saved, value in intake.saves[before:] if saved == name]
    assert 1 <= len(writes) <= 4, writes  # not one per post (8)
    assert writes[-1] == str(posts[-1]["create_at"])


async def test_reactions_become_feedback(fake: FakeMattermost, running: Any) -> None:
    adapter, intake = await start(fake, running)
    target = ReplyTarget(platform="mattermost", scope=adapter.scope, chat_id=fake.town_square.id)
    sent = await adapter.transport.send(target, "an answer", idempotency_key="fb-1")
    assert sent.platform_message_id is not None
    await fake.react(sent.platform_message_id, "thumbsup")
    await fake.react(sent.platform_message_id, "tada")  # not feedback
    await fake.react(sent.platform_message_id, "thumbsup", removed=True)
    await wait_until(lambda: len(intake.feedback) == 2, message="two feedback calls")
    assert [f["value"] for f in intake.feedback] == [1, 0]
    assert intake.feedback[0] == {
        "platform": "mattermost",
        "chat_id": fake.town_square.id,
        "message_id": sent.platform_message_id,
        "user_id": fake.alice.id,
        "value": 1,
    }
    assert not intake.rejected  # reactions are not stored as inbound events


# --- typing --------------------------------------------------------------------------------


async def test_typing_sends_user_typing_in_the_thread(fake: FakeMattermost, running: Any) -> None:
    adapter, _ = await start(fake, running)
    target = ReplyTarget(
        platform="mattermost", scope=adapter.scope, chat_id=fake.town_square.id, thread_id="rootid"
    )
    await adapter.transport.typing(target)
    await wait_until(
        lambda: any(a.get("action") == "user_typing" for a in fake.ws_actions),
        message="typing action",
    )
    action = next(a for a in fake.ws_actions if a.get("action") == "user_typing")
    assert action["data"] == {"channel_id": fake.town_square.id, "parent_id": "rootid"}
    assert isinstance(action["seq"], int) and action["seq"] > 1


async def test_typing_without_a_connection_is_a_no_op(fake: FakeMattermost) -> None:
    adapter = MattermostAdapter(make_config(fake))
    target = ReplyTarget(platform="mattermost", scope=adapter.scope, chat_id="c")
    await adapter.transport.typing(target)  # never started: nothing to send, no error
    await adapter.stop()
    assert fake.ws_actions == []


async def test_stop_ends_the_stream_cleanly(fake: FakeMattermost, running: Any) -> None:
    adapter, _ = await start(fake, running)
    task = adapter._task
    await adapter.stop()
    assert task is not None and task.done() and not task.cancelled()  # ended, not killed
    await wait_until(lambda: fake.live_connections == 0, message="socket closed")
    assert fake.connections_total == 1  # and no reconnect after stop


def _bare_stream(fake: FakeMattermost, *, token: str) -> EventStream:
    async def nothing(*_: Any) -> None:
        return None

    return EventStream(
        url=fake.url.replace("http", "ws", 1) + "/api/v4/websocket",
        token=token,
        on_event=nothing,
        on_error=nothing,
        on_connected=nothing,
        backoff=FAST_BACKOFF,
        hello_timeout=1.0,
        use_env_proxy=False,
    )
