"""A gap longer than one since-query ("reconciliation covers the gap"): the server's
GetPostsSince answers at most 1000 posts, picked in an order SQL leaves undefined, so after a
long outage in a busy channel the rest must come from the page form, back to the cursor.
Real fake server, real adapter, real core on PostgreSQL; the limits are lowered on both sides
so the gap stays small."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import structlog

from adapters.mattermost.adapter import MattermostAdapter
from gateway.core.domain import SessionKey
from gateway.runtime.gateway import Gateway
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import running_gateway, wait_for
from testsupport.mattermost import connected, make_config

SINCE_LIMIT = 40
PER_PAGE = 15  # the fake caps per_page here; the adapter asks for 200


@asynccontextmanager
async def gateway_with(
    fake: FakeMattermost, database_url: str, **config: Any
) -> AsyncIterator[tuple[Gateway, MattermostAdapter]]:
    adapter = MattermostAdapter(make_config(fake, since_limit=SINCE_LIMIT, **config))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        await connected(adapter)
        yield gw, adapter


async def live_before(fake: FakeMattermost, gw: Gateway, adapter: MattermostAdapter) -> int:
    """Two posts read live before the outage; returns the town square cursor they leave."""
    name = f"mattermost:{adapter.scope}:channel:{fake.town_square.id}"
    await fake.user_posts(fake.town_square, "older than the cursor")
    marker = await fake.user_posts(fake.town_square, "at the cursor")

    async def moved() -> bool:
        return await gw.store.inbox.load_cursor(name) == str(marker["create_at"])

    await wait_for(moved, message="the live posts' cursor")
    return int(marker["create_at"])


async def offline(fake: FakeMattermost) -> None:
    fake.refuse_websockets = 503
    await fake.drop_connections(1006)
    await wait_for(lambda: fake.live_connections == 0, message="disconnected")


async def thread_while_away(fake: FakeMattermost, replies: int) -> list[str]:
    """A thread in town square, posted while nobody listens: its post ids, oldest first."""
    root = await fake.user_posts(fake.town_square, "a long outage")
    ids = [root["id"]]
    for n in range(replies):
        reply = await fake.user_posts(fake.town_square, f"reply {n}", root_id=root["id"])
        ids.append(reply["id"])
    return ids


async def stored(gw: Gateway, adapter: MattermostAdapter, chat_id: str, root_id: str) -> list[str]:
    """The post ids stored in a thread's session, in the order they were stored."""
    key = SessionKey(platform="mattermost", scope=adapter.scope, chat_id=chat_id, thread_id=root_id)
    session = await gw.store.sessions.find_session(key)
    if session is None:
        return []
    messages = await gw.store.sessions.messages(session.id, limit=10_000)
    return [m.external_id or "" for m in messages if m.role == "user"]


def channel_requests(fake: FakeMattermost, channel_id: str) -> list[dict[str, str]]:
    return [
        r.query for r in fake.requests_to("posts_since") if r.path.endswith(f"/{channel_id}/posts")
    ]


@pytest.mark.parametrize("server_picks_oldest", [False, True])
async def test_a_gap_over_the_since_limit_is_reconciled_in_full(
    fake: FakeMattermost, database_url: str, server_picks_oldest: bool
) -> None:
    fake.since_limit = SINCE_LIMIT
    fake.since_picks_oldest = server_picks_oldest
    fake.per_page_max = PER_PAGE
    async with gateway_with(fake, database_url) as (gw, adapter):
        await live_before(fake, gw, adapter)
        await offline(fake)
        thread = await thread_while_away(fake, 3 * SINCE_LIMIT)
        dm = [await fake.user_posts(fake.dm_alice, f"dm {n}") for n in range(3)]
        fake.requests.clear()
        fake.refuse_websockets = None
        await connected(adapter, 2)

        # every post of the gap stored once, in creation order
        assert await stored(gw, adapter, fake.town_square.id, thread[0]) == thread
        # the since-query, then pages back to the first one with a post older than the
        # cursor (the gap and the post at the cursor come first, newest first)
        town = channel_requests(fake, fake.town_square.id)
        assert "since" in town[0] and all("page" in q for q in town[1:])
        assert len(town) - 1 == (len(thread) + 1) // PER_PAGE + 1
        # a channel under the limit: exactly one request, as before
        assert [list(q) for q in channel_requests(fake, fake.dm_alice.id)] == [["since"]]
        assert len(dm) == 3
        name = f"mattermost:{adapter.scope}:channel:{fake.town_square.id}"
        assert await gw.store.inbox.load_cursor(name) == str(fake.posts[thread[-1]]["create_at"])


async def test_paging_that_stops_short_of_the_cursor_keeps_it(
    fake: FakeMattermost, database_url: str
) -> None:
    fake.since_limit = SINCE_LIMIT
    fake.per_page_max = PER_PAGE
    async with gateway_with(fake, database_url, max_pages=2) as (gw, adapter):
        cursor = await live_before(fake, gw, adapter)
        await offline(fake)
        thread = await thread_while_away(fake, 3 * SINCE_LIMIT)
        fake.refuse_websockets = None
        with structlog.testing.capture_logs() as logs:
            await connected(adapter, 2)

        # the newest since-answer and two pages were stored, the cursor did not move past
        # the posts neither of them reached (the next reconciliation reads them again)
        assert any(e["event"] == "mattermost_reconcile_pages_exhausted" for e in logs)
        name = f"mattermost:{adapter.scope}:channel:{fake.town_square.id}"
        assert await gw.store.inbox.load_cursor(name) == str(cursor)
        got = await stored(gw, adapter, fake.town_square.id, thread[0])
        assert got == [thread[0], *thread[-SINCE_LIMIT:]]
