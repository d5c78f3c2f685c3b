"""Keep the fake honest: what it emits has the shapes of the captured payloads, and its REST
answers carry the real server's headers and semantics."""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.asyncio.client import connect

from testsupport.fakes.mattermost import FakeMattermost
from testsupport.mattermost import load_payload


async def _frames_after(fake: FakeMattermost, token: str, action: Any) -> list[dict[str, Any]]:
    url = fake.url.replace("http", "ws", 1) + "/api/v4/websocket"
    async with connect(
        url, additional_headers={"Authorization": f"Bearer {token}"}, proxy=None
    ) as ws:
        frames = [json.loads(await ws.recv())]  # hello
        await action()
        frames.append(json.loads(await ws.recv()))
        return frames


async def test_posted_frame_has_the_captured_shape(fake: FakeMattermost) -> None:
    async def post() -> None:
        await fake.user_posts(fake.town_square, "hello", user="alice", mention_bot=True)

    hello, posted = await _frames_after(fake, fake.bot.token or "", post)
    real_hello = load_payload("mattermost_ws_hello.capture.json")
    assert hello.keys() == real_hello.keys() and hello["seq"] == 0
    assert hello["data"].keys() == real_hello["data"].keys()
    assert hello["broadcast"].keys() == real_hello["broadcast"].keys()

    real = load_payload("mattermost_ws_posted_root_post.capture.json")
    assert posted.keys() == real.keys() and posted["seq"] == 1
    # mentions is added per recipient: only the mentioned bot's copy carries it
    assert posted["data"].keys() == real["data"].keys() | {"mentions"}
    assert json.loads(posted["data"]["mentions"]) == [fake.bot.id]  # stringified array
    assert isinstance(posted["data"]["post"], str)  # a JSON string, like the server's
    assert json.loads(posted["data"]["post"]).keys() == json.loads(real["data"]["post"]).keys()
    assert posted["broadcast"].keys() == real["broadcast"].keys()


async def test_unmentioned_recipient_gets_no_mentions(fake: FakeMattermost) -> None:
    async def post() -> None:
        await fake.user_posts(fake.town_square, "no mention here", user="alice")

    _, posted = await _frames_after(fake, fake.bot.token or "", post)
    assert "mentions" not in posted["data"]


async def test_rest_content_type_and_rate_limit_headers(fake: FakeMattermost) -> None:
    async with httpx.AsyncClient(
        base_url=fake.url, trust_env=False, headers={"Authorization": f"Bearer {fake.bot.token}"}
    ) as c:
        me = await c.get("/api/v4/users/me")
        assert me.headers["content-type"] == "application/json"  # exactly, no charset
        assert me.json()["is_bot"] is True
        fake.rate_limit_next(retry_after=3)
        limited = await c.post(
            "/api/v4/posts", json={"channel_id": fake.town_square.id, "message": "x"}
        )
        assert limited.status_code == 429 and limited.text.strip() == "limit exceeded"
        assert limited.headers["retry-after"] == "3"
        assert {"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"} <= set(
            limited.headers
        )
        unauthorized = await c.get("/api/v4/users/me", headers={"Authorization": "Bearer no"})
        assert unauthorized.status_code == 401
        assert unauthorized.json()["id"] == "api.context.session_expired.app_error"


async def test_posts_since_returns_updates_and_their_roots(fake: FakeMattermost) -> None:
    root = await fake.user_posts(fake.town_square, "root")
    since = root["create_at"]
    reply = await fake.user_posts(fake.town_square, "reply", root_id=root["id"])
    async with httpx.AsyncClient(
        base_url=fake.url, trust_env=False, headers={"Authorization": f"Bearer {fake.bot.token}"}
    ) as c:
        answer = await c.get(
            f"/api/v4/channels/{fake.town_square.id}/posts", params={"since": str(since)}
        )
    body = answer.json()
    # the reply (UpdateAt > since) and its root (added for context / bumped UpdateAt)
    assert set(body["posts"]) == {root["id"], reply["id"]}
    assert body["order"][0] == reply["id"]


async def test_posts_made_while_nobody_is_connected_are_not_pushed_later(
    fake: FakeMattermost,
) -> None:
    missed = await fake.user_posts(fake.town_square, "nobody listens", mention_bot=True)

    async def post() -> None:
        await fake.user_posts(fake.town_square, "live", mention_bot=True)

    _, first = await _frames_after(fake, fake.bot.token or "", post)
    assert json.loads(first["data"]["post"])["id"] != missed["id"]


async def test_posts_page_form_newest_first_capped_with_roots(fake: FakeMattermost) -> None:
    root = await fake.user_posts(fake.town_square, "root")
    replies = [
        await fake.user_posts(fake.town_square, f"reply {n}", root_id=root["id"]) for n in range(4)
    ]
    gone = await fake.user_posts(fake.town_square, "deleted")
    await fake.delete_post(gone["id"])
    top = [await fake.user_posts(fake.town_square, f"top {n}") for n in range(3)]
    newest_first = [p["id"] for p in reversed([root, *replies, *top])]
    fake.per_page_max = 3
    url = f"/api/v4/channels/{fake.town_square.id}/posts"
    async with httpx.AsyncClient(
        base_url=fake.url, trust_env=False, headers={"Authorization": f"Bearer {fake.bot.token}"}
    ) as c:
        pages = [
            (await c.get(url, params={"page": str(n), "per_page": "200"})).json() for n in range(4)
        ]
        default = (await c.get(url)).json()  # no since: the page form, page 0, per_page 60
        since_zero = (await c.get(url, params={"since": "0"})).json()  # 0 is not a since
        closed = fake.add_channel("bots-only", "P", members={fake.bot.id})
        alice = await c.get(
            f"/api/v4/channels/{closed.id}/posts",
            params={"page": "0"},
            headers={"Authorization": f"Bearer {fake.alice.token}"},
        )
    # newest first by create_at, deleted posts left out, per_page capped, then empty
    assert [i for p in pages for i in p["order"]] == newest_first
    assert [len(p["order"]) for p in pages] == [3, 3, 2, 0]
    # a page of replies carries their root in posts, not in order
    assert root["id"] in pages[1]["posts"] and root["id"] not in pages[1]["order"]
    assert default["order"] == since_zero["order"] == newest_first[:3]
    assert alice.status_code == 403  # the same permission check as the since form


async def test_posts_since_answers_at_most_since_limit(fake: FakeMattermost) -> None:
    posts = [await fake.user_posts(fake.town_square, f"post {n}") for n in range(5)]
    fake.since_limit = 2
    url = f"/api/v4/channels/{fake.town_square.id}/posts"
    params = {"since": str(posts[0]["create_at"] - 1)}
    async with httpx.AsyncClient(
        base_url=fake.url, trust_env=False, headers={"Authorization": f"Bearer {fake.bot.token}"}
    ) as c:
        newest = (await c.get(url, params=params)).json()
        fake.since_picks_oldest = True
        oldest = (await c.get(url, params=params)).json()
    assert newest["order"] == [posts[4]["id"], posts[3]["id"]]
    assert oldest["order"] == [posts[1]["id"], posts[0]["id"]]
