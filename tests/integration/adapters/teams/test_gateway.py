"""Fake Bot Framework -> Teams adapter (JWT checked) -> the real core (store on PostgreSQL,
turns, delivery) -> the connector client -> the fake's connector."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.agents.base import Turn
from gateway.core.domain import Reply, SessionKey
from gateway.runtime.gateway import Gateway
from session_store.records import MessageRecord
from testsupport.fakes.teams import BOB, TENANT, FakeTeams
from testsupport.harness import assert_paced, wait_for
from testsupport.teams import teams_gateway


def key(fake: FakeTeams, place_id: str, thread: str | None) -> SessionKey:
    return SessionKey(platform="teams", scope=TENANT, chat_id=place_id, thread_id=thread)


async def messages_of(gw: Gateway, k: SessionKey) -> list[MessageRecord]:
    session = await gw.store.sessions.find_session(k)
    assert session is not None, f"no session {k}"
    return await gw.store.sessions.recent(session.id, 100)


async def delivered(gw: Gateway, message_id: str) -> None:
    """The answer's id is recorded (the fake has it a moment before the gateway does)."""

    async def recorded() -> bool:
        async with gw.store.db.connection() as conn:
            return bool(
                await conn.fetchval(
                    "SELECT count(*) FROM deliveries WHERE platform_message_id = $1", message_id
                )
            )

    await wait_for(recorded, message="the delivery's id never recorded")


async def test_a_channel_mention_is_answered_in_its_reply_chain_and_a_reply_continues_it(
    database_url: str, fake: FakeTeams
) -> None:
    async with teams_gateway(database_url, fake) as gw:
        posted = await fake.user_posts(fake.channel, "what is our uptime?")
        assert posted.status == 200, posted.body
        root = posted.activity["id"]
        (answer,) = await wait_for(lambda: fake.bot_messages(fake.channel), message="the answer")
        assert answer.root == root and answer.text == "echo: what is our uptime?"
        assert answer.conversation == f"{fake.channel.id};messageid={root}"
        # a reply in the chain, without a mention: the same session, answered there
        reply = await fake.user_posts(fake.channel, "and last week?", mention=False, thread=root)
        assert reply.status == 200
        await wait_for(lambda: len(fake.bot_messages(fake.channel)) == 2, message="2nd answer")
        stored = await messages_of(gw, key(fake, fake.channel.id, root))
        assert [(m.role, m.content) for m in stored] == [
            ("user", "what is our uptime?"),
            ("assistant", "echo: what is our uptime?"),
            ("user", "and last week?"),
            ("assistant", "echo: and last week?"),
        ]
    assert all(m.root == root for m in fake.bot_messages())
    assert fake.thread_violations == []
    assert fake.token_requests == 1  # one token, cached for every send


async def test_chats_are_answered_in_the_chat(database_url: str, fake: FakeTeams) -> None:
    personal = fake.personal_chat()
    group = fake.group_chat()
    async with teams_gateway(database_url, fake) as gw:
        await fake.user_posts(personal, "hello", mention=False)
        await fake.user_posts(group, "not for the bot", mention=False, person=BOB)
        await fake.user_posts(group, "hi all")
        await wait_for(lambda: fake.bot_messages(personal) and fake.bot_messages(group))
        assert [m.text for m in fake.bot_messages(personal)] == ["echo: hello"]
        assert [m.text for m in fake.bot_messages(group)] == ["echo: hi all"]
        stored = await messages_of(gw, key(fake, group.id, None))
        assert [m.content for m in stored if m.role == "user"] == ["not for the bot", "hi all"]
    assert all(m.root is None for m in fake.bot_messages())


async def test_the_same_activity_delivered_twice_is_answered_once(
    database_url: str, fake: FakeTeams
) -> None:
    async with teams_gateway(database_url, fake) as gw:
        first = await fake.user_posts(fake.channel, "once")
        again = await fake.deliver(first.activity)
        assert again.status == 200
        await wait_for(lambda: fake.bot_messages(fake.channel), message="the answer")
        root = first.activity["id"]
        stored = await messages_of(gw, key(fake, fake.channel.id, root))
        assert [m.role for m in stored] == ["user", "assistant"]
    assert len(fake.bot_messages()) == 1


async def test_429_waits_retry_after_then_posts_once(database_url: str, fake: FakeTeams) -> None:
    fake.rate_limit_next(1, retry_after=0.5)
    async with teams_gateway(database_url, fake):
        await fake.user_posts(fake.channel, "busy?")
        await wait_for(lambda: fake.bot_messages(fake.channel), timeout=15, message="answer")
    posts = [c for c in fake.calls if c[0] == "POST"]
    assert [c[3] for c in posts] == [429, 201]
    assert posts[1][2] - posts[0][2] >= 0.45
    assert len(fake.bot_messages()) == 1


async def test_a_long_answer_is_split_in_order_in_the_reply_chain(
    database_url: str, fake: FakeTeams
) -> None:
    words = " ".join(f"word{n}" for n in range(6000))  # about 53 KB: three messages
    async with teams_gateway(database_url, fake):
        posted = await fake.user_posts(fake.channel, words)
        await wait_for(
            lambda: " ".join(m.text for m in fake.bot_messages(fake.channel)) == f"echo: {words}",
            timeout=20,
            message="all parts",
        )
    parts = fake.bot_messages(fake.channel)
    assert len(parts) == 3 and all(len(p.text.encode()) <= 24_000 for p in parts)
    assert all(p.root == posted.activity["id"] for p in parts)


async def test_an_edit_rewrites_the_answer_in_place_and_a_deletion_retracts_it(
    database_url: str, fake: FakeTeams
) -> None:
    async with teams_gateway(database_url, fake, GATEWAY_ON_DELETE="retract") as gw:
        posted = await fake.user_posts(fake.channel, "how mnay?")
        (answer,) = await wait_for(lambda: fake.bot_messages(fake.channel), message="answer")
        await delivered(gw, answer.id)
        root = posted.activity["id"]
        edited = await fake.edits(root, "<at>Gateway</at> how many?")
        assert edited.status == 200
        await wait_for(lambda: answer.text == "echo: how many?", message="answer rewritten")
        assert answer.root == root and (answer.id, "echo: how many?") in fake.updates
        deleted = await fake.deletes(root)
        assert deleted.status == 200
        await wait_for(lambda: answer.id in fake.deleted, message="the answer retracted")
        # the same edit delivered again counts once
        again = await fake.deliver(edited.activity)
        assert again.status == 200
    assert fake.sends() and len(fake.sends()) == 1  # rewritten and retracted, never re-posted


@pytest.mark.parametrize("reaction", ["like"])
async def test_a_like_on_an_answer_is_its_feedback(
    database_url: str, fake: FakeTeams, reaction: str
) -> None:
    async with teams_gateway(database_url, fake) as gw:
        await fake.user_posts(fake.channel, "rate me")
        (answer,) = await wait_for(lambda: fake.bot_messages(fake.channel))
        assert answer.channel_data.get("feedbackLoopEnabled") is True
        await delivered(gw, answer.id)
        liked = await fake.reacts(answer.id, reaction)
        assert liked.status == 200
        async with gw.store.db.connection() as conn:
            rows = await conn.fetch("SELECT value FROM message_feedback")
        assert [r["value"] for r in rows] == [1]


class SixReplies:
    """Answers every turn with six separate replies."""

    name = "six"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        return [Reply(text=f"part {n}") for n in range(6)]


async def test_sends_to_one_conversation_are_paced(database_url: str, fake: FakeTeams) -> None:
    async with teams_gateway(database_url, fake, agent=SixReplies()):
        await fake.user_posts(fake.channel, "many answers please")
        await wait_for(lambda: len(fake.bot_messages()) == 6, timeout=20, message="6 replies")
    assert [m.text for m in fake.bot_messages()] == [f"part {n}" for n in range(6)]
    # Bot Framework allows 7 messages a second per conversation but only 60 in 30 s:
    # after a burst of 3, one every half second
    assert_paced(fake.sends(), 0.5, 3, at_least=0.8)
