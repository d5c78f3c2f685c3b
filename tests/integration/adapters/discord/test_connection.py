"""The Discord gateway connection's promises against the fake Discord: a dropped connection
is resumed and what it missed is replayed (nothing lost, nothing twice); a session Discord
forgot, or a gateway that was down, is caught up from the channels' history; 429s, per route
and global, are waited out through the outbox's retry; long answers are split at 2,000."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.discord.adapter import DiscordAdapter
from testsupport.discord import make_config, session_up
from testsupport.fakes.discord import FakeDiscord
from testsupport.harness import running_gateway, wait_for


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        yield server


def _answers(fake: FakeDiscord, channel_id: str) -> list[str]:
    return [m["content"] for m in fake.in_channel(channel_id, by=fake.bot)]


async def test_a_dropped_connection_is_resumed_with_nothing_lost_or_repeated(
    fake: FakeDiscord, database_url: str
) -> None:
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        dm, other = fake.dm(fake.alice), fake.dm(fake.bob)
        await fake.user_posts(dm, "one")
        await wait_for(lambda: _answers(fake, dm.id) == ["echo: one"], timeout=20)

        # cut, no close frame: the session stays resumable. What is posted meanwhile goes to
        # two conversations, so each is its own turn (two messages in one thread, replayed
        # together, may rightly get one answer that covers both)
        fake.drop()
        await fake.user_posts(dm, "two")
        await fake.user_posts(other, "three", user=fake.bob)
        await wait_for(lambda: adapter.resumes >= 1, timeout=20, message="no RESUMED")
        await wait_for(lambda: len(_answers(fake, dm.id)) == 2, timeout=20)
        await wait_for(lambda: _answers(fake, other.id) == ["echo: three"], timeout=20)

        # Discord asks for a reconnect (op 7): resumed again
        await fake.request_reconnect()
        await fake.user_posts(dm, "four")
        await wait_for(lambda: adapter.resumes >= 2, timeout=20, message="no second RESUMED")
        await wait_for(lambda: len(_answers(fake, dm.id)) == 3, timeout=20)
        assert fake.resumes == [True, True] and fake.identifies == 1
        assert _answers(fake, dm.id) == ["echo: one", "echo: two", "echo: four"]
        assert adapter.reconciler.caught_up == 0  # the replay did it, not the history
    assert len(_answers(fake, dm.id)) == 3 and _answers(fake, other.id) == ["echo: three"]


async def test_a_forgotten_session_and_a_restart_are_caught_up_from_history(
    fake: FakeDiscord, database_url: str
) -> None:
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        dm = fake.dm(fake.bob)
        await fake.user_posts(dm, "hi", user=fake.bob)
        question = await fake.user_posts(fake.general, "first", mention_bot=True)
        thread = question["id"]
        await wait_for(lambda: _answers(fake, dm.id) and _answers(fake, thread), timeout=20)

        # the session is gone: what is posted now is never dispatched, only in history
        # (whose first read is rate limited: waited out, not skipped)
        fake.rate_limit_next("GET", "/messages", 0.3)
        fake.forget_session()
        await fake.user_posts(fake.channels[thread], "missed in the thread")
        await fake.user_posts(dm, "missed in the dm", user=fake.bob)
        await session_up(adapter, fake, sessions=2)
        await wait_for(lambda: len(_answers(fake, thread)) == 2, timeout=20)
        await wait_for(lambda: len(_answers(fake, dm.id)) == 2, timeout=20)
        assert fake.resumes == [False] and fake.identifies == 2
        assert adapter.reconciler.caught_up >= 2
        assert len(fake.limited) == 1 and fake.limited[0][1] == "GET"

    # the gateway is down while people write; a new process catches up
    await fake.user_posts(fake.channels[thread], "while down")
    restarted = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[restarted], web_chat=False):
        await session_up(restarted, fake)
        await wait_for(lambda: len(_answers(fake, thread)) == 3, timeout=20)
        assert restarted.reconciler.caught_up >= 1
    assert _answers(fake, thread) == [
        "echo: @gatewaybot first",
        "echo: missed in the thread",
        "echo: while down",
    ]
    assert _answers(fake, dm.id) == ["echo: hi", "echo: missed in the dm"]
    assert fake.threads_started == [thread]


async def test_a_thread_the_bot_started_while_no_session_heard_of_it_is_caught_up(
    fake: FakeDiscord, database_url: str
) -> None:
    """The bot's answer starts its thread while the gateway is between sessions (a replica
    taking over the connection; REST serves all along), so no THREAD_CREATE tells the
    adapter to follow it, and a person writes in it meanwhile. The new session lists the
    thread (GUILD_CREATE): what was written there is read from its history."""
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        # the thread's start is refused once, so it is made a moment later, in the gap
        fake.rate_limit_next("POST", "/threads", 1.5)
        question = await fake.user_posts(fake.general, "first", mention_bot=True)
        thread = question["id"]
        await wait_for(lambda: len(fake.limited) == 1, timeout=20)
        fake.identify_delay = 4.0
        fake.forget_session()
        await wait_for(lambda: _answers(fake, thread), timeout=20)
        assert fake.session is None  # nobody heard of the thread's creation
        await fake.user_posts(fake.channels[thread], "written in the gap")
        await session_up(adapter, fake, sessions=2)
        await wait_for(lambda: len(_answers(fake, thread)) == 2, timeout=20)
    assert _answers(fake, thread) == ["echo: @gatewaybot first", "echo: written in the gap"]


async def test_a_thread_a_person_started_while_no_session_was_there_is_caught_up(
    fake: FakeDiscord, database_url: str
) -> None:
    """A person starts a thread and asks the bot there while the gateway is between
    sessions: no THREAD_CREATE tells the adapter to follow it, so no cursor reads it. The
    new session lists it active (GUILD_CREATE) with a last message newer than anything
    handled before: it is read from its start and the question answered. A listed thread
    quiet since before the gap is not read (its history could be long, and nothing is new)."""
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        quiet = await fake.user_posts(fake.general, "an old topic")
        await fake.user_starts_thread(quiet, "old topic")
        await fake.user_posts(fake.channels[quiet["id"]], "nothing for the bot here")
        before = await fake.user_posts(fake.general, "before", mention_bot=True)
        await wait_for(lambda: _answers(fake, before["id"]), timeout=20)  # in its thread
        # the quiet thread was followed live: forget that, as if it began before the bot
        cursors = await adapter.reconciler.cursors()
        cursors.pop(quiet["id"])
        read_before = len(fake.requests)
        fake.identify_delay = 4.0
        fake.forget_session()
        await wait_for(lambda: fake.session is None, timeout=10)
        start = await fake.user_posts(fake.general, "let us talk in a thread")
        thread = await fake.user_starts_thread(start, "gap topic")
        await fake.user_posts(thread, "asked in the gap", mention_bot=True)
        await session_up(adapter, fake, sessions=2)
        await wait_for(lambda: _answers(fake, thread.id), timeout=20)
    assert _answers(fake, thread.id) == ["echo: @gatewaybot asked in the gap"]
    read_after = [p for _, m, p in fake.requests[read_before:] if m == "GET"]
    assert not any(f"/channels/{quiet['id']}/messages" in p for p in read_after), read_after


async def test_429s_per_route_and_global_are_waited_out(
    fake: FakeDiscord, database_url: str
) -> None:
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        dm = fake.dm(fake.alice)
        fake.rate_limit_next("POST", f"/channels/{dm.id}/messages", 0.6)
        await fake.user_posts(dm, "route")
        await wait_for(lambda: _answers(fake, dm.id) == ["echo: route"], timeout=20)

        # a global 429 holds every send of the bot, in any channel, for its retry_after
        fake.rate_limit_next("POST", "/messages", 0.8, global_=True)
        await fake.user_posts(dm, "global")
        await wait_for(lambda: len(fake.limited) == 2, timeout=20)
        other = fake.dm(fake.bob)
        await fake.user_posts(other, "meanwhile", user=fake.bob)
        await wait_for(lambda: len(_answers(fake, dm.id)) == 2, timeout=20)
        await wait_for(lambda: _answers(fake, other.id) == ["echo: meanwhile"], timeout=20)
    assert _answers(fake, dm.id) == ["echo: route", "echo: global"]
    assert len(fake.limited) == 2
    for (limited_at, _, _), wait in zip(fake.limited, (0.6, 0.8), strict=True):
        # the next message send, to any channel, came only after the wait Discord asked for
        later = [
            at
            for at, method, path in fake.requests
            if at > limited_at and method == "POST" and path.endswith("/messages")
        ]
        assert later and later[0] - limited_at >= wait - 0.05


async def test_a_long_answer_is_split_into_messages_of_at_most_2000(
    fake: FakeDiscord, database_url: str
) -> None:
    adapter = DiscordAdapter(make_config(fake))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await session_up(adapter, fake)
        dm = fake.dm(fake.alice)
        long = " ".join(f"word{n}" for n in range(700))  # about 5,500 characters
        await fake.user_posts(dm, long)
        await wait_for(lambda: len(_answers(fake, dm.id)) == 3, timeout=20)
        answers = _answers(fake, dm.id)
        assert all(len(a) <= 2000 for a in answers)
        assert " ".join(a.strip() for a in answers).split() == ("echo: " + long).split()
