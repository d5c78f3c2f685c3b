"""Keep the fake honest: what it emits has the shapes of the captured payloads, and its REST
answers carry the real server's headers and semantics."""

from __future__ import annotations

import json
from typing import Any

import httpx
from websockets.asyncio.client import connect

from benchmarks.fakes.mattermost import FakeMattermost
from tests.mattermost.conftest import load_payload


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
