"""Web chat identity: accounts with sign-in, a trusted proxy's header, and the
zero-config local user; the sender and voter are the signed-in person; private channels;
malformed posts get 4xx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from gateway.http.webauth import COOKIE, FAIL_WINDOW, MAX_FAILURES, hash_password, wait_words
from gateway.runtime.gateway import Gateway
from session_store.repos.accounts import AccountStore
from testsupport.harness import running_gateway, wait_for

POST = "/web/api/channels/general/messages"


@asynccontextmanager
async def accounts_gateway(database_url: str, **overrides: Any) -> AsyncIterator[Gateway]:
    async with running_gateway(database_url, GATEWAY_WEB_AUTH="accounts", **overrides) as gw:
        accounts = AccountStore(gw.store.db)
        await accounts.add("ann", hash_password("ann-password"))
        await accounts.add("bob", hash_password("bob-password"))
        yield gw


async def _sign_in(client: httpx.AsyncClient, name: str, password: str) -> httpx.Response:
    return await client.post("/login", json={"name": name, "password": password})


async def test_accounts_sign_in_post_as_yourself_and_sign_out(database_url: str) -> None:
    async with (
        accounts_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url) as ann,
        httpx.AsyncClient(base_url=gw.url) as stranger,
    ):
        # signed out: the page sends you to sign in, the API answers 401
        page = await stranger.get("/")
        assert page.status_code == 303 and page.headers["location"] == "/login"
        assert (await stranger.get("/login")).status_code == 200
        assert (await stranger.get("/web/api/channels")).status_code == 401
        sneaky = await stranger.post(POST, json={"text": "hi", "client_msg_id": "s1"})
        assert sneaky.status_code == 401

        wrong = await _sign_in(ann, "ann", "nope-nope")
        assert wrong.status_code == 401 and COOKIE not in wrong.cookies
        ok = await _sign_in(ann, "ann", "ann-password")
        assert ok.status_code == 200, ok.text
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Secure" not in cookie

        # the sender is the signed-in person; a name in the body is refused, not believed
        spoof = await ann.post(POST, json={"text": "hi", "client_msg_id": "a0", "user": "bob"})
        assert spoof.status_code == 422
        sent = await ann.post(POST, json={"text": "hello", "client_msg_id": "a1"})
        assert sent.status_code == 200, sent.text
        history = "/web/api/channels/general/threads/a1/messages"
        messages = (await ann.get(history)).json()["messages"]
        assert messages[0]["sender"] == "ann"

        # a vote is cast by the signed-in person
        async def answer() -> int | None:
            msgs = (await ann.get(history)).json()["messages"]
            return next((m["seq_no"] for m in msgs if m["role"] == "assistant"), None)

        seq = await wait_for(answer)
        voted = await ann.post(f"{history}/{seq}/feedback", json={"value": 1})
        assert voted.status_code == 200
        async with gw.store.db.connection() as conn:
            voters = await conn.fetch("SELECT user_id FROM message_feedback")
        assert [r["user_id"] for r in voters] == ["ann"]

        # signing out ends this cookie everywhere (a copy kept by an attacker too)
        stolen = ann.cookies.get(COOKIE)
        assert (await ann.post("/logout")).status_code == 200
        assert (await ann.get(history)).status_code == 401
        stranger.cookies.set(COOKIE, stolen or "")
        assert (await stranger.get(history)).status_code == 401
        # a forged cookie is nobody
        stranger.cookies.set(COOKIE, "eyJuIjoiYW5uIiwiaSI6OTk5OTk5OTk5OTl9.AAAA")
        assert (await stranger.get(history)).status_code == 401


async def test_private_channels_are_private(database_url: str) -> None:
    async with (
        accounts_gateway(database_url) as gw,
        httpx.AsyncClient(base_url=gw.url) as ann,
        httpx.AsyncClient(base_url=gw.url) as bob,
    ):
        assert (await _sign_in(ann, "ann", "ann-password")).status_code == 200
        assert (await _sign_in(bob, "bob", "bob-password")).status_code == 200
        mine = (await ann.get("/web/api/me")).json()["private_channel"]
        assert mine == "~ann"
        sent = await ann.post(
            f"/web/api/channels/{mine}/messages", json={"text": "diary", "client_msg_id": "d1"}
        )
        assert sent.status_code == 200
        shared = await ann.post(POST, json={"text": "team", "client_msg_id": "t1"})
        assert shared.status_code == 200
        # bob sees the shared channel and its thread, never ann's private one
        channels = (await bob.get("/web/api/channels")).json()
        assert "~ann" not in channels["channels"] and channels["private"] == "~bob"
        assert (await bob.get("/web/api/channels/general/threads/t1/messages")).status_code == 200
        for path in (
            "/web/api/channels/~ann/threads",
            "/web/api/channels/~ann/threads/d1/messages",
            "/web/api/channels/~ann/threads/d1/stream",
        ):
            assert (await bob.get(path)).status_code == 404, path
        posted = await bob.post(
            "/web/api/channels/~ann/messages", json={"text": "x", "client_msg_id": "b1"}
        )
        assert posted.status_code == 404
        diary = (await ann.get("/web/api/channels/~ann/threads/d1/messages")).json()
        assert diary["messages"][0]["content"] == "diary"


async def test_sign_in_attempts_are_rate_limited(database_url: str) -> None:
    async with accounts_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        for _ in range(MAX_FAILURES):
            assert (await _sign_in(c, "ann", "guess-guess")).status_code == 401
        limited = await _sign_in(c, "ann", "ann-password")
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        # malformed sign-ins are 4xx
        for body in (
            {},
            {"name": "ann"},
            {"name": 1, "password": 2},
            [1],
            # found by the fuzz test: a lone surrogate reached argon2 (500)
            {"name": "ann", "password": "\ud800"},
            {"name": "a\ud800", "password": "x"},
            {"name": "ann", "password": "a\x00b"},
        ):
            raw = json.dumps(body).encode()  # lone surrogates travel as JSON escapes
            assert (await c.post("/login", content=raw, headers=_json())).status_code == 422
        assert (await c.post("/login", content=b"\xff", headers=_json())).status_code == 422


async def test_the_lockout_says_how_long_to_wait(database_url: str) -> None:
    async with accounts_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        for _ in range(MAX_FAILURES):
            assert (await _sign_in(c, "ann", "guess-guess")).status_code == 401
        limited = await _sign_in(c, "ann", "ann-password")
        assert limited.status_code == 429
        # the window is five minutes from the first failure, a moment ago
        retry_after = int(limited.headers["retry-after"])
        assert FAIL_WINDOW - 30 < retry_after <= FAIL_WINDOW
        assert limited.json()["error"] == "Too many attempts: try again in 5 minutes"


def test_wait_words() -> None:
    assert wait_words(0.2) == "1 second"
    assert wait_words(41.5) == "42 seconds"
    assert wait_words(61) == "2 minutes"
    assert wait_words(240) == "4 minutes"
    assert wait_words(299.9) == "5 minutes"


def _json() -> dict[str, str]:
    return {"Content-Type": "application/json"}


async def test_proxy_header_counts_only_from_trusted_proxies(database_url: str) -> None:
    # the test client connects from 127.0.0.1; trust another address only
    async with (
        running_gateway(
            database_url, GATEWAY_WEB_AUTH="proxy", GATEWAY_TRUSTED_PROXIES="10.9.9.9/32"
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as c,
    ):
        forged = {"X-Forwarded-User": "admin"}
        assert (await c.get("/web/api/me", headers=forged)).status_code == 401
        assert (await c.get("/", headers=forged)).status_code == 401
        # even claiming to come through the trusted proxy does not help
        spoofed = {**forged, "X-Forwarded-For": "10.9.9.9"}
        assert (await c.get("/web/api/me", headers=spoofed)).status_code == 401
    async with (
        running_gateway(
            database_url,
            GATEWAY_WEB_AUTH="proxy",
            GATEWAY_TRUSTED_PROXIES="127.0.0.0/8",
            GATEWAY_WEB_AUTH_HEADER="X-Auth-Request-User",
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as c,
    ):
        me = await c.get("/web/api/me", headers={"X-Auth-Request-User": "carol"})
        assert me.status_code == 200 and me.json()["user"] == "carol"
        assert (await c.get("/web/api/me")).status_code == 401
        bad = await c.get("/web/api/me", headers={"X-Auth-Request-User": "carol\tx"})
        assert bad.status_code == 401


async def test_zero_config_is_one_local_user(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        me = (await c.get("/web/api/me")).json()
        assert me == {
            "user": "local",
            "auth": "none",
            "private_channel": "~local",
            "can_sign_out": False,
            "echo_agent": True,
        }
        assert (await c.get("/login")).status_code in (404, 405)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"text": "nul \x00 here", "client_msg_id": "n1"}, 422),
        ({"text": "lone \ud800 surrogate", "client_msg_id": "n2"}, 422),
        ({"text": "extra", "client_msg_id": "n3", "admin": True}, 422),
        ({"text": "", "client_msg_id": "n4"}, 422),
        ({"text": "x", "client_msg_id": "bad id!"}, 422),
    ],
)
async def test_malformed_posts_are_4xx(
    database_url: str, body: dict[str, object], status: int
) -> None:
    raw = json.dumps(body).encode()  # \u0000 and \ud800 travel as JSON escapes
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        response = await c.post(POST, content=raw, headers=_json())
        assert response.status_code == status, response.text
        # stored as a dead letter, with a payload PostgreSQL could hold
        events = await gw.operator.ops.inbound_events(status="rejected", limit=5)
        assert len(events) == 1


async def test_feedback_seq_past_int64_and_bad_paths_are_4xx(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        base = "/web/api/channels/general/threads/t1/messages"
        for seq in (2**63, 2**64 + 5, 10**30):
            response = await c.post(f"{base}/{seq}/feedback", json={"value": 1})
            assert response.status_code == 404, seq
        for path in (
            "/web/api/channels/bad%00name/threads",
            "/web/api/channels/general/threads/%00/messages",
            "/web/api/channels/" + "x" * 300 + "/threads",
            "/web/api/channels/general/threads/" + "é" * 10 + "/messages",
        ):
            assert 400 <= (await c.get(path)).status_code < 500, path
        extra = await c.post(f"{base}/1/feedback", json={"value": 1, "user": "mallory"})
        assert extra.status_code == 422


async def test_the_cookie_is_secure_behind_an_https_proxy(database_url: str) -> None:
    # a proxy on loopback (or in GATEWAY_TRUSTED_PROXIES) terminates TLS
    async with accounts_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        ok = await c.post(
            "/login",
            json={"name": "ann", "password": "ann-password"},
            headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"},
        )
        assert ok.status_code == 200
        assert "Secure" in ok.headers["set-cookie"]
