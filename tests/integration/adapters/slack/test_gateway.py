"""Stage 2: fake Slack -> Slack adapter -> the real core (store on PostgreSQL, turn scheduler,
delivery worker, HTTP server) -> Slack transport -> fake Slack.

"No second reply" is asserted from the database, never by sleeping: the fake returns only after
Slack got its 2xx/ack (= after the inbox transaction committed), so once the one reply has been
posted, a duplicate that would have asked for another answer would be visible as a second stored
user message or a second delivery row.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

import adapters.slack.adapter as slack_adapter
from adapters.slack import SlackAdapter
from gateway.agents.base import Agent, Turn
from gateway.core.domain import Reply, SessionKey
from gateway.runtime.gateway import Gateway
from session_store.records import MessageRecord
from testsupport.fakes.slack import FakeSlack
from testsupport.harness import assert_paced, running_gateway, wait_for
from testsupport.slack import slack_settings


class RecordingEcho:
    """The echo agent's answer, plus a record of every turn's context."""

    name = "recording-echo"

    def __init__(self, reply: str | None = None) -> None:
        self.turns: list[Turn] = []
        self.reply = reply

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.turns.append(turn)
        return [Reply(text=self.reply or f"echo: {turn.new_messages[-1].content}")]


#: the Slack settings the core's door reads (the plugin's answer settings)
ANSWER_SETTINGS = frozenset(
    {
        "SLACK_ALLOWED_CHANNELS",
        "SLACK_ALLOWED_USERS",
        "SLACK_ANSWER_ALL_CHANNELS",
        "SLACK_REQUIRE_MENTION",
    }
)


@asynccontextmanager
async def slack_gateway(
    database_url: str,
    fake: FakeSlack,
    *,
    agent: Agent | None = None,
    socket_mode: bool = False,
    **overrides: Any,
) -> AsyncIterator[Gateway]:
    if socket_mode:
        overrides.setdefault("SLACK_APP_TOKEN", fake.app_token)
        overrides.setdefault("SLACK_SIGNING_SECRET", None)
        fake.mode = "socket"
    adapter = SlackAdapter(slack_settings(fake, **overrides))
    # the answer settings reach the core's door through the gateway's settings
    answers = {k: v for k, v in overrides.items() if k in ANSWER_SETTINGS}
    async with running_gateway(
        database_url, adapters=[adapter], agent=agent, web_chat=False, **answers
    ) as gw:
        fake.events_url = f"{gw.url}slack/events"
        yield gw


def key(fake: FakeSlack, channel: str, thread: str | None) -> SessionKey:
    return SessionKey(platform="slack", scope=fake.team_id, chat_id=channel, thread_id=thread)


async def messages_of(gw: Gateway, k: SessionKey) -> list[MessageRecord]:
    session = await gw.store.sessions.find_session(k)
    assert session is not None, f"no session {k}"
    return await gw.store.sessions.recent(session.id, 100)


async def user_messages(gw: Gateway, k: SessionKey) -> list[MessageRecord]:
    return [m for m in await messages_of(gw, k) if m.role == "user"]


async def test_top_level_mention_is_answered_once_in_a_new_thread(
    database_url: str, fake: FakeSlack
) -> None:
    fake.concurrent_mention_events = True  # app_mention and message race into the inbox
    async with slack_gateway(database_url, fake) as gw:
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> hello")
        assert all(d.succeeded for d in posted.deliveries) and len(posted.deliveries) == 2
        (reply,) = await wait_for(lambda: fake.bot_posts("C0GENERAL"), message="the reply")
        assert reply.thread_ts == posted.ts  # the mention opened a thread under itself
        assert reply.text == "echo: hello"
        # the bot's own post came back as a message event and was ignored, not answered
        await wait_for(lambda: len(fake.deliveries) == 3 and fake.deliveries[-1].succeeded)
        stored = await messages_of(gw, key(fake, "C0GENERAL", posted.ts))
        assert [(m.role, m.content) for m in stored] == [
            ("user", "hello"),
            ("assistant", "echo: hello"),
        ]
    assert len(fake.bot_posts()) == 1
    assert fake.thread_violations == []


async def test_thread_follow_up_continues_the_session_in_the_root_thread(
    database_url: str, fake: FakeSlack
) -> None:
    fake.emit_message_replied = True  # the hidden notification (no subtype) must not answer
    async with slack_gateway(database_url, fake) as gw:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> one")
        await wait_for(lambda: len(fake.bot_posts()) == 1, message="first reply")
        follow = await fake.user_posts("C0GENERAL", "two", thread_ts=root.ts)
        await wait_for(lambda: len(fake.bot_posts()) == 2, message="follow-up reply")
        first, second = fake.bot_posts()
        assert first.thread_ts == second.thread_ts == root.ts != follow.ts
        assert second.text == "echo: two"
        session_key = key(fake, "C0GENERAL", root.ts)
        assert [m.content for m in await messages_of(gw, session_key)] == [
            "one",
            "echo: one",
            "two",
            "echo: two",
        ]
    assert fake.thread_violations == []


async def test_follow_up_where_the_bot_never_answered_is_context_only(
    database_url: str, fake: FakeSlack
) -> None:
    agent = RecordingEcho()
    async with slack_gateway(database_url, fake, agent=agent) as gw:
        root = await fake.user_posts("C0GENERAL", "lunch anyone?")
        await fake.user_posts("C0GENERAL", "me!", thread_ts=root.ts)
        session_key = key(fake, "C0GENERAL", root.ts)
        assert [m.trigger for m in await user_messages(gw, session_key)] == [
            "context",
            "context",
        ]
        # a mention in that thread is answered there, with the earlier messages as context
        await fake.user_posts("C0GENERAL", "<@U0BOT> where?", thread_ts=root.ts)
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply")
        assert reply.thread_ts == root.ts
        (turn,) = agent.turns
        assert [m.content for m in turn.context] == ["lunch anyone?", "me!", "where?"]
    assert fake.calls_to("conversations.replies") == []  # the session was known: no backfill


async def test_require_mention_keeps_follow_ups_as_context(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake, SLACK_REQUIRE_MENTION=True) as gw:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> one")
        await wait_for(lambda: len(fake.bot_posts()) == 1, message="first reply")
        await fake.user_posts("C0GENERAL", "two", thread_ts=root.ts)
        stored = await user_messages(gw, key(fake, "C0GENERAL", root.ts))
        assert [(m.content, m.trigger) for m in stored] == [("one", "answer"), ("two", "context")]


async def test_slack_retry_of_an_answered_event_gets_no_second_reply(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake) as gw:
        posted = await fake.user_posts("D0DM", "hi")
        await wait_for(lambda: fake.bot_posts("D0DM"), message="the reply")
        (delivery,) = posted.deliveries
        await fake.resend(delivery, reason="http_timeout")
        await fake.resend(delivery, reason="http_timeout")
        assert [(a.retry_num, a.status) for a in delivery.attempts] == [
            (0, 200),
            (1, 200),
            (2, 200),
        ]
        dm = key(fake, "D0DM", None)
        assert len(await user_messages(gw, dm)) == 1
        session = await gw.store.sessions.find_session(dm)
        assert session is not None
        assert len(await gw.store.outbox.deliveries_for_session(session.id)) == 1
    assert len(fake.bot_posts()) == 1


async def test_dm_is_answered_in_the_dm_and_stays_one_session(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake) as gw:
        await fake.user_posts("D0DM", "first")
        await wait_for(lambda: len(fake.bot_posts()) == 1, message="first reply")
        await fake.user_posts("D0DM", "second")
        await wait_for(lambda: len(fake.bot_posts()) == 2, message="second reply")
        assert [(p.channel, p.thread_ts, p.text) for p in fake.bot_posts()] == [
            ("D0DM", None, "echo: first"),
            ("D0DM", None, "echo: second"),
        ]
        assert len(await messages_of(gw, key(fake, "D0DM", None))) == 4
        assert "thread_ts" not in fake.calls_to("chat.postMessage")[0].params


async def test_mid_thread_mention_gets_the_thread_as_backfilled_context(
    database_url: str, fake: FakeSlack
) -> None:
    agent = RecordingEcho()
    root, _ = fake.seed_thread(
        "C0GENERAL",
        [("U0ANN", "it broke at 3pm"), ("U0BOB", "logs attached")],
        root_text="incident in prod",
    )
    async with slack_gateway(database_url, fake, agent=agent) as gw:
        fake.concurrent_mention_events = True  # both events race to backfill
        mention = await fake.user_posts("C0GENERAL", "<@U0BOT> summarize", thread_ts=root)
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply")
        assert reply.thread_ts == root
        stored = await messages_of(gw, key(fake, "C0GENERAL", root))
        assert [(m.content, m.backfill, m.trigger) for m in stored] == [
            ("incident in prod", True, "context"),
            ("it broke at 3pm", True, "context"),
            ("logs attached", True, "context"),
            ("summarize", False, "answer"),
            ("echo: summarize", False, None),
        ]
        assert stored[3].external_id == mention.ts
        (turn,) = agent.turns
        assert [m.content for m in turn.context] == [
            "incident in prod",
            "it broke at 3pm",
            "logs attached",
            "summarize",
        ]
    assert fake.thread_violations == []


async def test_429_is_retried_after_retry_after_and_posted_once(
    database_url: str, fake: FakeSlack
) -> None:
    fake.fail_next("chat.postMessage", status=429, retry_after=1)
    async with slack_gateway(database_url, fake):
        await fake.user_posts("C0GENERAL", "<@U0BOT> hi")
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply after 429")
    first, second = fake.calls_to("chat.postMessage")
    assert (first.status, second.status) == (429, 200)
    assert reply.text == "echo: hi"


async def test_channel_not_found_becomes_a_visible_failed_delivery(
    database_url: str, fake: FakeSlack
) -> None:
    fake.fail_next("chat.postMessage", error="channel_not_found")
    async with slack_gateway(database_url, fake) as gw:
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> hi")
        session = await gw.store.sessions.find_session(key(fake, "C0GENERAL", posted.ts))
        assert session is not None

        async def failed() -> Any:
            rows = await gw.store.outbox.deliveries_for_session(session.id)
            return [r for r in rows if r.status == "failed"]

        (row,) = await wait_for(failed, message="a failed delivery row")
        assert "channel_not_found" in (row.last_error or "")
        assert row.target.thread_id == posted.ts
    assert len(fake.calls_to("chat.postMessage")) == 1  # permanent: not retried
    assert fake.bot_posts() == []


async def test_send_timeout_is_recorded_ambiguous_and_never_resent(
    database_url: str, fake: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slack_adapter, "WEB_TIMEOUT_SECONDS", 1)
    fake.fail_next("chat.postMessage", delay=1.5)  # Slack posts it, the answer comes too late
    async with slack_gateway(database_url, fake) as gw:
        posted = await fake.user_posts("D0DM", "hi")
        session = await gw.store.sessions.find_session(key(fake, "D0DM", None))
        assert session is not None and posted.ts

        async def failed() -> Any:
            rows = await gw.store.outbox.deliveries_for_session(session.id)
            return [r for r in rows if r.status == "failed"]

        (row,) = await wait_for(failed, message="the ambiguous delivery")
        assert "ambiguous" in (row.last_error or "")
        await wait_for(lambda: fake.bot_posts(), message="the late post landing")
    assert len(fake.calls_to("chat.postMessage")) == 1  # never re-sent
    assert len(fake.bot_posts()) == 1  # it did land, once


async def test_long_reply_is_split_in_order_in_the_same_thread(
    database_url: str, fake: FakeSlack
) -> None:
    paragraphs = [f"Paragraph {i}: " + ("word " * 300).strip() for i in range(12)]  # ~18,000
    agent = RecordingEcho(reply="\n\n".join(paragraphs))
    async with slack_gateway(database_url, fake, agent=agent):
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> tell me everything")
        await wait_for(
            lambda: any("Paragraph 11:" in p.text for p in fake.bot_posts()),
            timeout=15,
            message="the last part",
        )
    posts = fake.bot_posts()
    assert len(posts) >= 5
    assert all(p.thread_ts == root.ts for p in posts)
    assert all(len(p.text) <= 3900 for p in posts)
    text = "\n\n".join(p.text for p in posts)
    positions = [text.index(f"Paragraph {i}:") for i in range(12)]
    assert positions == sorted(positions)  # parts in order
    # paced: a short burst, then one post per second in one channel (transport.pace)
    sent = [c.at for c in fake.calls_to("chat.postMessage") if c.status == 200]
    assert len(sent) == len(posts)
    assert_paced(sent, 1.0, 3, at_least=0.9)


async def test_markdown_reply_is_sent_as_mrkdwn(database_url: str, fake: FakeSlack) -> None:
    agent = RecordingEcho(reply="**Done** — see [the docs](https://x.test/?a=1&b=2)")
    async with slack_gateway(database_url, fake, agent=agent):
        await fake.user_posts("D0DM", "status?")
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply")
    assert reply.text == "*Done* — see <https://x.test/?a=1&amp;b=2|the docs>"


async def test_an_edit_is_an_annotation_and_the_answer_is_edited_not_posted_again(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake) as gw:
        posted = await fake.user_posts("D0DM", "helo")
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply")
        (delivery,) = await fake.user_edits("D0DM", posted.ts, "hello")
        assert delivery.succeeded
        # on_edit = "update" (the default): the answer is rewritten in place
        await wait_for(lambda: fake.updates, message="the answer edited")
        stored = await user_messages(gw, key(fake, "D0DM", None))
        assert stored[0].content == "helo" and stored[0].edited_at is not None
    assert [(u[1], u[3]) for u in fake.updates] == [(reply.ts, "echo: hello")]
    assert len(fake.bot_posts()) == 1


async def test_other_bots_are_context_and_own_posts_are_ignored(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake) as gw:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> start")
        await wait_for(lambda: fake.bot_posts(), message="the reply")
        await fake.other_bot_posts("C0GENERAL", "<@U0BOT> beep", thread_ts=root.ts)
        stored = await messages_of(gw, key(fake, "C0GENERAL", root.ts))
        assert [(m.role, m.content, m.trigger) for m in stored] == [
            ("user", "start", "answer"),
            ("assistant", "echo: start", None),
            ("user", "beep", "context"),
        ]
    assert len(fake.bot_posts()) == 1


async def test_socket_mode_end_to_end_with_redelivery(database_url: str, fake: FakeSlack) -> None:
    async with slack_gateway(database_url, fake, socket_mode=True) as gw:
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> via socket")
        assert all(d.succeeded for d in posted.deliveries)
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply")
        assert reply.thread_ts == posted.ts
        for delivery in posted.deliveries:  # Slack redelivers envelopes whose ack it lost
            await fake.resend(delivery, reason="timeout")
            assert delivery.ack_count == 2
        assert len(await user_messages(gw, key(fake, "C0GENERAL", posted.ts))) == 1
        # the connection loop runs under the core's supervisor on this replica
        worker = f"ingress:slack-socket:{fake.team_id}"
        assert worker in gw.supervisor.loops and gw.supervisor.down() == []
        assert f'gateway_worker_up{{worker="{worker}"}} 1.0' in gw.metrics.render().decode()
    assert len(fake.bot_posts()) == 1


async def test_bad_signature_is_401_and_nothing_is_stored(
    database_url: str, fake: FakeSlack
) -> None:
    body = b'{"type":"event_callback","team_id":"T0FAKE","event_id":"EvX","event":{}}'
    async with slack_gateway(database_url, fake) as gw:
        stale = fake.sign(body, timestamp=int(time.time()) - 600)
        assert (await fake.post_raw(body, stale))[0] == 401
        forged = {**fake.sign(body), "X-Slack-Signature": "v0=" + "f" * 64}
        assert (await fake.post_raw(body, forged))[0] == 401
        assert await gw.store.sessions.list_sessions(platform="slack") == []
        # and the same body, properly signed, is accepted (as a dead letter: no message)
        assert (await fake.post_raw(body, fake.sign(body)))[0] == 200


async def test_thumbs_reactions_on_a_reply_are_its_feedback(
    database_url: str, fake: FakeSlack
) -> None:
    async with slack_gateway(database_url, fake) as gw:
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> rate me")
        (reply,) = await wait_for(lambda: fake.bot_posts("C0GENERAL"), message="the reply")
        k = key(fake, "C0GENERAL", posted.ts)

        async def marked_sent() -> bool:
            # the receipt (the reply's ts) is stored just after the post returns; a reaction
            # can only be matched to the reply once it is
            return (await gw.store.outbox.delivery_counts()).get("sent", 0) == 1

        await wait_for(marked_sent, message="the receipt")

        async def feedback() -> int | None:
            session = await gw.store.sessions.find_session(k)
            assert session is not None
            rows = await messages_of(gw, k)
            reply_seq = next(m.seq_no for m in rows if m.role == "assistant")
            return (await gw.store.sessions.feedback_by_seq(session.id)).get(reply_seq)

        def reaction(kind: str, name: str, ts: str) -> dict[str, Any]:
            return fake.wrap(
                {
                    "type": kind,
                    "user": "U0HUMAN",
                    "reaction": name,
                    "item": {"type": "message", "channel": "C0GENERAL", "ts": ts},
                    "event_ts": fake.next_ts(),
                }
            )

        await fake.deliver(reaction("reaction_added", "+1::skin-tone-2", reply.ts))
        assert await wait_for(lambda: _eq(feedback(), 1), message="+1 stored")
        await fake.deliver(reaction("reaction_removed", "+1", reply.ts))
        await fake.deliver(reaction("reaction_added", "-1", reply.ts))
        assert await wait_for(lambda: _eq(feedback(), -1), message="changed to -1")
        # a reaction on the person's own message is not feedback on the bot
        await fake.deliver(reaction("reaction_added", "+1", posted.ts))
        assert await feedback() == -1


async def _eq(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def test_a_command_typed_as_text_in_a_thread_is_a_command(
    database_url: str, fake: FakeSlack
) -> None:
    """Slack offers no slash commands in threads, so people type ``/schedule ...`` as text
    there: it is scheduled (and answered as a command), not asked to the model."""
    agent = RecordingEcho()
    async with slack_gateway(database_url, fake, agent=agent) as gw:
        root = await fake.user_posts("C0GENERAL", "<@U0BOT> one")
        await wait_for(lambda: len(fake.bot_posts()) == 1, message="first reply")
        await fake.user_posts(
            "C0GENERAL", "/schedule at 2099-12-04 09:00 stand-up notes", thread_ts=root.ts
        )
        await wait_for(lambda: len(fake.bot_posts()) == 2, message="the command's answer")
        (made,) = await gw.schedule_room.service.listing()
    answer = fake.bot_posts()[1]
    assert answer.thread_ts == root.ts
    assert answer.text.startswith("Scheduled"), answer.text
    assert made.prompt == "stand-up notes"
    assert made.key == key(fake, "C0GENERAL", root.ts)
    assert len(agent.turns) == 1, "the model was asked only the first question"
