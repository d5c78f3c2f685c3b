"""End to end: fake Mattermost -> our websocket client -> the real core (PostgreSQL inbox,
sessions, turns, delivery) -> our transport -> the fake. Every assertion is about where replies
landed in the fake's post model, and how many."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

from adapters.mattermost.adapter import MattermostAdapter
from gateway.agents.base import Agent, Turn
from gateway.core.domain import Reply, SessionKey
from gateway.runtime.gateway import Gateway
from session_store.records import DeliveryRecord
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import running_gateway, wait_for
from testsupport.mattermost import connected, make_config


@asynccontextmanager
async def gateway_with(
    fake: FakeMattermost, database_url: str, *, agent: Agent | None = None, **config: Any
) -> AsyncIterator[tuple[Gateway, MattermostAdapter]]:
    adapter = MattermostAdapter(make_config(fake, **config))
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False) as gw:
        await connected(adapter)
        yield gw, adapter


def replies(fake: FakeMattermost, channel: Any, root_id: str | None = None) -> list[str]:
    return [p["message"] for p in fake.posts_in(channel, root_id=root_id, by=fake.bot)]


async def test_thread_exactness_in_channels(fake: FakeMattermost, database_url: str) -> None:
    async with gateway_with(fake, database_url):
        a = await fake.user_posts(fake.town_square, "in A", mention_bot=True)
        b = await fake.user_posts(fake.town_square, "in B", mention_bot=True)
        await wait_for(
            lambda: (
                replies(fake, fake.town_square, a["id"])
                and replies(fake, fake.town_square, b["id"])
            ),
            message="two answers",
        )
        # each root is answered in its own thread (root_id = the root post's id) and only there
        assert replies(fake, fake.town_square, a["id"]) == ["echo: @gatewaybot in A"]
        assert replies(fake, fake.town_square, b["id"]) == ["echo: @gatewaybot in B"]
        assert replies(fake, fake.town_square, "") == []  # nothing at the top level

        # a follow-up in thread A (no mention) is answered in A, with A's root - never with
        # the follow-up's own id, which the server would refuse
        follow = await fake.user_posts(fake.town_square, "more on A", root_id=a["id"])
        await wait_for(
            lambda: len(replies(fake, fake.town_square, a["id"])) == 2, message="follow-up answer"
        )
        assert replies(fake, fake.town_square, a["id"])[-1] == "echo: more on A"
        assert replies(fake, fake.town_square, follow["id"]) == []
        assert replies(fake, fake.town_square, b["id"]) == ["echo: @gatewaybot in B"]


async def test_unmentioned_chatter_is_context_only(fake: FakeMattermost, database_url: str) -> None:
    async with gateway_with(fake, database_url) as (gw, adapter):
        quiet = await fake.user_posts(fake.town_square, "just talking")
        ping = await fake.user_posts(fake.town_square, "answer me", mention_bot=True)
        bot = await fake.user_posts(fake.town_square, "@gatewaybot I am a bot", user=fake.other_bot)
        await wait_for(lambda: replies(fake, fake.town_square, ping["id"]), message="answer")
        key = SessionKey(
            platform="mattermost",
            scope=adapter.scope,
            chat_id=fake.town_square.id,
            thread_id=quiet["id"],
        )
        assert await gw.store.sessions.find_session(key) is not None  # stored as context
        assert replies(fake, fake.town_square, quiet["id"]) == []
        assert replies(fake, fake.town_square, bot["id"]) == []  # other bots: never answered
        assert len(fake.bot_posts()) == 1  # and the bot never answers itself


async def test_dm_is_answered_in_the_dm(fake: FakeMattermost, database_url: str) -> None:
    async with gateway_with(fake, database_url):
        await fake.user_posts(fake.dm_alice, "hello bot")
        await wait_for(lambda: replies(fake, fake.dm_alice), message="DM answer")
        await fake.user_posts(fake.dm_alice, "second")
        await wait_for(lambda: len(replies(fake, fake.dm_alice)) == 2, message="2nd answer")
        posts = fake.posts_in(fake.dm_alice, by=fake.bot)
        assert [(p["message"], p["root_id"]) for p in posts] == [
            ("echo: hello bot", ""),
            ("echo: second", ""),
        ]


async def test_duplicate_delivery_is_answered_once(fake: FakeMattermost, database_url: str) -> None:
    async with gateway_with(fake, database_url) as (_, adapter):
        post = await fake.user_posts(fake.town_square, "once please", mention_bot=True)
        await wait_for(lambda: replies(fake, fake.town_square, post["id"]), message="answer")
        await fake.replay_posted(post["id"])  # the same event again...
        await fake.drop_connections(1006)  # ...and again through reconciliation
        await connected(adapter, 2)
        marker = await fake.user_posts(fake.dm_alice, "marker")
        await wait_for(lambda: replies(fake, fake.dm_alice), message="marker answer")
        assert marker["id"]
        assert replies(fake, fake.town_square, post["id"]) == ["echo: @gatewaybot once please"]


async def test_handler_exception_then_next_event_answered(
    fake: FakeMattermost, database_url: str
) -> None:
    async with gateway_with(fake, database_url) as (gw, _):
        real_submit = gw.intake.submit
        broken = {"armed": True}

        async def flaky_submit(extracted: Any, *, raw: Any) -> Any:
            if broken["armed"] and getattr(extracted, "text", "").endswith("explode"):
                broken["armed"] = False
                raise RuntimeError("database hiccup")
            return await real_submit(extracted, raw=raw)

        gw.intake.submit = flaky_submit  # type: ignore[method-assign]
        bad = await fake.user_posts(fake.town_square, "explode", mention_bot=True)
        good = await fake.user_posts(fake.town_square, "next one", mention_bot=True)
        await wait_for(lambda: replies(fake, fake.town_square, good["id"]), message="next")
        assert fake.connections_total == 1  # the connection survived
        # the failed one is re-fetched (its channel cursor was held) and answered once
        await wait_for(
            lambda: replies(fake, fake.town_square, bad["id"]), message="held post answered"
        )
        assert replies(fake, fake.town_square, bad["id"]) == ["echo: @gatewaybot explode"]


async def test_post_made_while_disconnected_is_answered_once(
    fake: FakeMattermost, database_url: str
) -> None:
    async with gateway_with(fake, database_url) as (_, adapter):
        fake.refuse_websockets = 503
        await fake.drop_connections(1006)
        await wait_for(lambda: fake.live_connections == 0, message="disconnected")
        missed = await fake.user_posts(fake.town_square, "while you were out", mention_bot=True)
        missed_dm = await fake.user_posts(fake.dm_alice, "dm while out")
        fake.refuse_websockets = None
        await connected(adapter, 2)
        await wait_for(
            lambda: replies(fake, fake.town_square, missed["id"]) and replies(fake, fake.dm_alice),
            message="answers after reconnect",
        )
        # one more reconnect re-reads the same window: still answered once
        await fake.drop_connections(1000)
        await connected(adapter, 3)
        probe = await fake.user_posts(fake.dm_alice, "probe")
        await wait_for(lambda: len(replies(fake, fake.dm_alice)) == 2, message="probe")
        assert probe["id"] and missed_dm["id"]
        assert replies(fake, fake.town_square, missed["id"]) == [
            "echo: @gatewaybot while you were out"
        ]
        assert replies(fake, fake.dm_alice) == ["echo: dm while out", "echo: probe"]


async def test_restart_answers_what_was_posted_while_down(
    fake: FakeMattermost, database_url: str
) -> None:
    async with gateway_with(fake, database_url):
        first = await fake.user_posts(fake.dm_alice, "before restart")
        await wait_for(lambda: replies(fake, fake.dm_alice), message="first answer")
    assert first["id"]
    down = await fake.user_posts(fake.dm_alice, "while down")  # nobody connected
    async with gateway_with(fake, database_url):
        await wait_for(lambda: len(replies(fake, fake.dm_alice)) == 2, message="after restart")
        assert down["id"]
        assert replies(fake, fake.dm_alice) == ["echo: before restart", "echo: while down"]


async def test_429_is_retried_after_retry_after(fake: FakeMattermost, database_url: str) -> None:
    fake.rate_limit_next(retry_after=1)
    async with gateway_with(fake, database_url):
        post = await fake.user_posts(fake.town_square, "rate me", mention_bot=True)
        await wait_for(lambda: replies(fake, fake.town_square, post["id"]), message="answer")
        attempts = fake.requests_to("create_post")
        assert len(attempts) == 2  # the 429, then the one that posted
        assert attempts[0].body["pending_post_id"] == attempts[1].body["pending_post_id"]
        assert replies(fake, fake.town_square, post["id"]) == ["echo: @gatewaybot rate me"]


class GatedAgent:
    """Answers only when released, so a test can change the world in between."""

    name = "gated"

    def __init__(self, text: str | None = None) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self._text = text

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.started.set()
        await self.release.wait()
        return [Reply(text=self._text or f"late: {turn.new_messages[-1].content}")]


async def test_root_deleted_before_the_answer_is_a_visible_failure(
    fake: FakeMattermost, database_url: str
) -> None:
    agent = GatedAgent()
    async with gateway_with(fake, database_url, agent=agent) as (gw, adapter):
        root = await fake.user_posts(fake.town_square, "ask then delete", mention_bot=True)
        await asyncio.wait_for(agent.started.wait(), 10)
        await fake.delete_post(root["id"])  # the thread is gone
        agent.release.set()
        key = SessionKey(
            platform="mattermost",
            scope=adapter.scope,
            chat_id=fake.town_square.id,
            thread_id=root["id"],
        )

        async def failed() -> list[DeliveryRecord] | None:
            session = await gw.store.sessions.find_session(key)
            if session is None:
                return None
            rows = await gw.store.outbox.deliveries_for_session(session.id)
            return [d for d in rows if d.status == "failed"]

        rows = cast(list[DeliveryRecord], await wait_for(failed, message="failed delivery"))
        assert "api.post.create_post.root_id.app_error" in (rows[0].last_error or "")
        assert rows[0].attempts == 1  # permanent: not retried
        assert fake.bot_posts() == []


async def test_long_answer_is_split_in_order_in_the_thread(
    fake: FakeMattermost, database_url: str
) -> None:
    long_text = "\n\n".join(f"paragraph {i} " + "x" * 5000 for i in range(5))
    agent = GatedAgent(text=long_text)
    agent.release.set()
    async with gateway_with(fake, database_url, agent=agent):
        root = await fake.user_posts(fake.town_square, "long please", mention_bot=True)
        await wait_for(
            lambda: len(replies(fake, fake.town_square, root["id"])) >= 2, message="parts"
        )
        await wait_for(
            lambda: "".join(replies(fake, fake.town_square, root["id"])).count("paragraph") == 5,
            message="all parts",
        )
        parts = replies(fake, fake.town_square, root["id"])
        assert all(len(p) <= 16383 for p in parts)
        assert parts[0].startswith("paragraph 0 ")
        joined = "".join(parts)
        assert [joined.index(f"paragraph {i}") for i in range(5)] == sorted(
            joined.index(f"paragraph {i}") for i in range(5)
        )


async def test_thumbs_up_on_a_reply_is_its_feedback(
    fake: FakeMattermost, database_url: str
) -> None:
    async with gateway_with(fake, database_url) as (gw, adapter):
        root = await fake.user_posts(fake.town_square, "rate my answer", mention_bot=True)
        await wait_for(lambda: replies(fake, fake.town_square, root["id"]), message="answer")
        reply = fake.posts_in(fake.town_square, root_id=root["id"], by=fake.bot)[0]
        key = SessionKey(
            platform="mattermost",
            scope=adapter.scope,
            chat_id=fake.town_square.id,
            thread_id=root["id"],
        )
        session = await gw.store.sessions.find_session(key)
        assert session is not None

        async def recorded() -> bool:
            # the post is visible at the server a moment before the gateway has recorded its
            # id; a person's reaction comes later than that
            rows = await gw.store.outbox.deliveries_for_session(session.id)
            return any(r.platform_message_id == reply["id"] for r in rows)

        await wait_for(recorded, message="the reply's post id recorded")
        await fake.react(reply["id"], "+1")
        await fake.react(root["id"], "-1")  # on the person's own post: not our feedback

        async def feedback() -> dict[int, int]:
            return await gw.store.sessions.feedback_by_seq(session.id)

        scores = cast(dict[int, int], await wait_for(feedback, message="feedback stored"))
        assert list(scores.values()) == [1]
