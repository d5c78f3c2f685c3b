"""The Discord surface end to end: the real gateway (echo agent, real PostgreSQL), the
adapter's hikari connection and REST client, and a fake Discord speaking the wire protocol
(testsupport/fakes/discord.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.discord.adapter import DiscordAdapter
from gateway.runtime.gateway import Gateway
from testsupport.discord import make_config, session_up
from testsupport.fakes.discord import FakeDiscord
from testsupport.harness import running_gateway, wait_for


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        yield server


async def _texts(fake: FakeDiscord, channel_id: str) -> list[str]:
    return [m["content"] for m in fake.in_channel(channel_id, by=fake.bot)]


async def _user_rows(gw: Gateway) -> list[Any]:
    async with gw.store.db.connection() as conn:
        return list(
            await conn.fetch(
                "SELECT m.content, s.chat_id, s.thread_id FROM messages m"
                " JOIN sessions s ON s.id = m.session_id WHERE m.role = 'user' ORDER BY m.id"
            )
        )


async def test_a_mention_starts_a_thread_on_the_message_and_follow_ups_stay_in_it(
    fake: FakeDiscord, database_url: str
) -> None:
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        question = await fake.user_posts(fake.general, "where are the docs?", mention_bot=True)
        thread = question["id"]
        await wait_for(lambda: fake.in_channel(thread, by=fake.bot), timeout=20)
        assert fake.threads_started == [thread]
        assert fake.channels[thread].parent_id == fake.general.id
        assert [m["content"] for m in fake.in_channel(thread, by=fake.bot)] == [
            "echo: @gatewaybot where are the docs?"
        ]
        # a follow-up in the thread, without a mention: the same session, answered there
        await fake.user_posts(fake.channels[thread], "and the api?")
        await wait_for(lambda: len(fake.in_channel(thread, by=fake.bot)) == 2, timeout=20)
        assert fake.in_channel(thread, by=fake.bot)[1]["content"] == "echo: and the api?"
        # a channel message not for the bot is kept as context, never answered
        await fake.user_posts(fake.general, "just chatting")
        await fake.user_posts(fake.channels[thread], "thanks")
        await wait_for(lambda: len(fake.in_channel(thread, by=fake.bot)) == 3, timeout=20)
        assert not fake.in_channel(fake.general.id, by=fake.bot)
        assert fake.threads_started == [thread]


async def test_a_dm_is_answered_in_the_dm_and_a_forum_post_in_its_thread(
    fake: FakeDiscord, database_url: str
) -> None:
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        await session_up(adapter, fake)
        dm = fake.dm(fake.bob)
        await fake.user_posts(dm, "hello there", user=fake.bob)
        await wait_for(lambda: fake.in_channel(dm.id, by=fake.bot), timeout=20)
        assert [m["content"] for m in fake.in_channel(dm.id, by=fake.bot)] == ["echo: hello there"]
        post = await fake.forum_post("Install fails", f"<@{fake.bot.id}> pip says no")
        await wait_for(lambda: fake.in_channel(post.id, by=fake.bot), timeout=20)
        assert fake.threads_started == []  # the forum post is a thread already
        rows = await _user_rows(gw)
        assert [(r["chat_id"], r["thread_id"]) for r in rows] == [
            (dm.id, None),
            (fake.forum.id, post.id),
        ]


async def test_edits_and_deletions_reach_the_core(fake: FakeDiscord, database_url: str) -> None:
    adapter = DiscordAdapter(make_config(fake))
    # ``context``: the edit only changes what later turns read (``update`` would rewrite the
    # answer, which the conversation-rules tests cover)
    async with running_gateway(
        database_url, adapters=[adapter], web_chat=False, GATEWAY_ON_EDIT="context"
    ) as gw:
        await session_up(adapter, fake)
        dm = fake.dm(fake.alice)
        first = await fake.user_posts(dm, "frist")
        await wait_for(lambda: fake.in_channel(dm.id, by=fake.bot), timeout=20)
        await fake.user_edits(first, "first")
        second = await fake.user_posts(dm, "oops")
        await wait_for(lambda: len(fake.in_channel(dm.id, by=fake.bot)) >= 2, timeout=20)
        await fake.user_deletes(second)

        async def annotated() -> list[Any]:
            async with gw.store.db.connection() as conn:
                return list(
                    await conn.fetch(
                        "SELECT a.kind, a.content, m.content AS original FROM message_annotations a"
                        " JOIN messages m ON m.id = a.message_id ORDER BY a.id"
                    )
                )

        rows = await wait_for(lambda: _two(annotated), timeout=20)
        assert [(r["kind"], r["content"], r["original"]) for r in rows] == [
            ("edit", "first", "frist"),
            ("delete", "", "oops"),
        ]
        # an edit is never answered again
        assert len(fake.in_channel(dm.id, by=fake.bot)) == 2


async def _two(query: Any) -> list[Any] | None:
    rows = await query()
    return rows if len(rows) >= 2 else None
