"""Single sign-on (``GATEWAY_WEB_AUTH=oidc``) against a real OpenID Connect provider run by the
test (``oidc-provider-mock``: Flask and Authlib, its own keys, discovery, authorize form and
token endpoint). An ordinary HTTP client follows the real redirects: the gateway's /login, the
provider's authorize form (posting the subject to sign in as), the gateway's callback."""

from __future__ import annotations

import socket
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import authlib.deprecate  # its import files Authlib's warnings as "always", past pytest's filters
import httpx
import pytest

with warnings.catch_warnings():
    # the test provider imports Authlib's older JOSE module, deprecated for joserfc (which
    # the gateway uses)
    warnings.simplefilter("ignore", authlib.deprecate.AuthlibDeprecationWarning)
    from oidc_provider_mock import run_server_in_thread

from gateway.core.errors import ConfigError
from gateway.core.settings import parsed
from gateway.http.webauth import COOKIE, OIDC_COOKIE
from gateway.runtime.gateway import Gateway
from testsupport.harness import make_settings, running_gateway, wait_for
from testsupport.process import run_cli

POST = "/web/api/channels/general/messages"
CLIENT_ID = "chat-gateway"


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    """A running OpenID provider's issuer URL (any client id is accepted, nonce required)."""
    with run_server_in_thread(require_nonce=True) as server:
        yield f"http://localhost:{server.server_port}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def oidc_gateway(database_url: str, issuer: str, **overrides: Any) -> AsyncIterator[Gateway]:
    port = free_port()
    values: dict[str, Any] = {
        "GATEWAY_WEB_AUTH": "oidc",
        "GATEWAY_HTTP_PORT": port,
        "GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "GATEWAY_OIDC_ISSUER": issuer,
        "GATEWAY_OIDC_CLIENT_ID": CLIENT_ID,
        "GATEWAY_OIDC_CLIENT_SECRET": "not-checked-by-the-mock",
        "GATEWAY_OIDC_ALLOWED_DOMAINS": "example.com",
        **overrides,
    }
    async with running_gateway(database_url, **values) as gw:
        yield gw


async def set_user(issuer: str, sub: str, **claims: object) -> None:
    async with httpx.AsyncClient() as client:
        answer = await client.put(f"{issuer}/users/{sub}", json=claims)
        assert answer.status_code == 204, answer.text


async def to_provider(browser: httpx.AsyncClient) -> str:
    """``GET /login`` on the gateway: the provider's authorize URL it redirects to."""
    begin = await browser.get("/login")
    assert begin.status_code == 303, begin.text
    assert OIDC_COOKIE in begin.cookies
    return begin.headers["location"]


async def authorize(authorize_url: str, form: dict[str, str]) -> str:
    """Submit the provider's authorize form: the callback URL it sends the browser back to."""
    async with httpx.AsyncClient() as at_provider:
        page = await at_provider.get(authorize_url)
        assert page.status_code == 200 and 'name="sub"' in page.text
        answer = await at_provider.post(authorize_url, data=form)
    assert answer.status_code == 302, answer.text
    return answer.headers["location"]


async def sign_in(browser: httpx.AsyncClient, sub: str) -> httpx.Response:
    """The whole round trip as a browser makes it; the gateway's answer to the callback."""
    callback = await authorize(await to_provider(browser), {"sub": sub})
    return await browser.get(callback)


async def whoami(browser: httpx.AsyncClient) -> str | None:
    me = await browser.get("/web/api/me")
    return str(me.json()["user"]) if me.status_code == 200 else None


async def audit(gw: Gateway) -> list[tuple[str, str, str | None, str | None]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT action, outcome, object_id, reason FROM audit_events ORDER BY id"
        )
    return [(r["action"], r["outcome"], r["object_id"], r["reason"]) for r in rows]


async def test_sign_in_links_the_subject_to_one_account(database_url: str, provider: str) -> None:
    await set_user(
        provider,
        "sub-ann-1",
        email="ann@example.com",
        email_verified=True,
        preferred_username="ann",
    )
    # another person at the provider who also calls herself ann
    await set_user(
        provider,
        "sub-ann-2",
        email="ann.other@example.com",
        email_verified=True,
        preferred_username="ann",
    )
    async with oidc_gateway(database_url, provider) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            # signed out, the chat sends you to sign in, and /login to the provider
            page = await browser.get("/")
            assert page.status_code == 303 and page.headers["location"] == "/login"
            authorize_url = await to_provider(browser)
            query = parse_qs(urlsplit(authorize_url).query)
            assert authorize_url.startswith(f"{provider}/oauth2/authorize?")
            assert query["client_id"] == [CLIENT_ID]
            assert query["redirect_uri"] == [f"{gw.url}login/callback"]
            assert query["code_challenge_method"] == ["S256"]
            assert query["scope"] == ["openid email profile"]
            assert query["state"][0] and query["nonce"][0]
            pending = browser.cookies.jar
            [cookie] = [c for c in pending if c.name == OIDC_COOKIE]
            assert cookie.path == "/login" and cookie.has_nonstandard_attr("HttpOnly")

            callback = await authorize(authorize_url, {"sub": "sub-ann-1"})
            done = await browser.get(callback)
            assert done.status_code == 303 and done.headers["location"] == "/", done.text
            session = done.headers["set-cookie"]
            assert f"{COOKIE}=" in session and "HttpOnly" in session and "SameSite=lax" in session
            assert await whoami(browser) == "ann"
            me = (await browser.get("/web/api/me")).json()
            assert me["auth"] == "oidc" and me["can_sign_out"] is True

            # the signed-in person is the sender, and a person like any web account: /link
            # offers a code for web:...:ann
            sent = await browser.post(POST, json={"text": "/link", "client_msg_id": "t1"})
            assert sent.status_code == 200, sent.text
            history = "/web/api/channels/general/threads/t1/messages"

            async def answer() -> str | None:
                msgs = (await browser.get(history)).json()["messages"]
                return next((m["content"] for m in msgs if m["role"] == "assistant"), None)

            assert "Your link code is" in str(await wait_for(answer))
            messages = (await browser.get(history)).json()["messages"]
            assert messages[0]["sender"] == "ann"
            async with gw.store.db.connection() as conn:
                accounts = await conn.fetch("SELECT account FROM link_codes")
            assert [r["account"].rsplit(":", 1)[1] for r in accounts] == ["ann"]

        # the same subject again, in a fresh browser: the same account
        async with httpx.AsyncClient(base_url=gw.url) as again:
            assert (await sign_in(again, "sub-ann-1")).status_code == 303
            assert await whoami(again) == "ann"

        # a different subject asking for the same name gets a name of its own
        async with httpx.AsyncClient(base_url=gw.url) as other:
            assert (await sign_in(other, "sub-ann-2")).status_code == 303
            assert await whoami(other) == "ann-2"

        async with gw.store.db.connection() as conn:
            links = await conn.fetch(
                "SELECT s.issuer, s.subject, a.name, a.password_hash FROM web_oidc_subjects s "
                "JOIN web_accounts a ON a.id = s.account_id ORDER BY a.name"
            )
        assert [(r["issuer"], r["subject"], r["name"]) for r in links] == [
            (provider, "sub-ann-1", "ann"),
            (provider, "sub-ann-2", "ann-2"),
        ]
        # no password opens these accounts
        async with httpx.AsyncClient(base_url=gw.url) as guesser:
            tried = await guesser.post("/login", json={"name": "ann", "password": "!oidc"})
            assert tried.status_code == 405
        assert all(not r["password_hash"].startswith("$argon2") for r in links)
        assert [a[:3] for a in await audit(gw) if a[0] == "web.sign_in"] == [
            ("web.sign_in", "ok", "ann"),
            ("web.sign_in", "ok", "ann"),
            ("web.sign_in", "ok", "ann-2"),
        ]


def with_param(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query[name] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


async def test_a_mismatched_state_or_a_provider_error_is_refused(
    database_url: str, provider: str
) -> None:
    await set_user(provider, "sub-bob", email="bob@example.com", email_verified=True)
    async with oidc_gateway(database_url, provider) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            callback = await authorize(await to_provider(browser), {"sub": "sub-bob"})
            forged = await browser.get(
                with_param(callback, "state", "not-the-state"), headers={"Accept": "text/html"}
            )
            assert forged.status_code == 403
            assert "Sign-in refused" in forged.text and "state does not match" in forged.text
            assert COOKIE not in forged.cookies and await whoami(browser) is None
            # the pending sign-in was used up: the right state does not work after a miss
            assert (await browser.get(callback)).status_code == 403
            assert await whoami(browser) is None

        # someone else's callback, planted in a browser that began no sign-in (login CSRF)
        async with httpx.AsyncClient(base_url=gw.url) as victim:
            planted = await victim.get(callback)
            assert planted.status_code == 403
            assert planted.json() == {"error": "the sign-in state does not match"}

        # the person presses Deny at the provider: error=access_denied comes back
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            denied = await authorize(await to_provider(browser), {"action": "deny"})
            assert "error=access_denied" in denied
            refused = await browser.get(denied)
            assert refused.status_code == 403
            assert refused.json() == {"error": "the provider said access_denied"}
            assert await whoami(browser) is None

        reasons = [a[3] for a in await audit(gw) if a[:2] == ("web.sign_in", "denied")]
        assert reasons == [
            "oidc: the sign-in state does not match",
            "oidc: the sign-in state does not match",
            "oidc: the sign-in state does not match",
            "oidc: the provider said access_denied",
        ]


async def test_only_allowed_domains_and_groups_get_in(database_url: str, provider: str) -> None:
    await set_user(provider, "sub-eve", email="eve@evil.example.org", email_verified=True)
    await set_user(provider, "sub-unverified", email="mallory@example.com", email_verified=False)
    await set_user(
        provider,
        "sub-contractor",
        email="carl@contractor.example.net",
        email_verified=True,
        groups=["chat-users"],
    )
    await set_user(
        provider,
        "sub-intern",
        email="ian@contractor.example.net",
        email_verified=True,
        groups=["interns"],
    )
    async with oidc_gateway(database_url, provider, GATEWAY_OIDC_ALLOWED_GROUPS="chat-users") as gw:
        for sub, reason in [
            ("sub-eve", "neither the e-mail domain nor a group may use the chat"),
            ("sub-unverified", "neither the e-mail domain nor a group may use the chat"),
            ("sub-intern", "neither the e-mail domain nor a group may use the chat"),
        ]:
            async with httpx.AsyncClient(base_url=gw.url) as browser:
                refused = await sign_in(browser, sub)
                assert refused.status_code == 403, sub
                assert refused.json() == {"error": reason}
                assert COOKIE not in refused.cookies and await whoami(browser) is None
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            assert (await sign_in(browser, "sub-contractor")).status_code == 303
            assert await whoami(browser) == "carl"
        async with gw.store.db.connection() as conn:
            assert await conn.fetchval("SELECT count(*) FROM web_oidc_subjects") == 1
        denied = [a for a in await audit(gw) if a[:2] == ("web.sign_in", "denied")]
        assert [a[2] for a in denied] == ["eve", "mallory", "ian"]

    # domains alone: an unverified address in the right domain is not enough
    async with oidc_gateway(database_url, provider) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            refused = await sign_in(browser, "sub-unverified")
            assert refused.status_code == 403
            assert refused.json() == {"error": "the e-mail address is not verified by the provider"}
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            refused = await sign_in(browser, "sub-eve")
            assert refused.json() == {"error": "this e-mail domain may not use the chat"}


async def test_a_tampered_cookie_signs_nobody_in_and_sign_out_revokes(
    database_url: str, provider: str
) -> None:
    await set_user(provider, "sub-dan", email="dan@example.com", email_verified=True)
    async with oidc_gateway(database_url, provider) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as browser:
            assert (await sign_in(browser, "sub-dan")).status_code == 303
            assert await whoami(browser) == "dan"  # the e-mail's local part
            cookie = browser.cookies[COOKIE]
            for tampered in (cookie[:-2] + ("AA" if cookie[-2:] != "AA" else "BB"), "x" + cookie):
                async with httpx.AsyncClient(base_url=gw.url, cookies={COOKIE: tampered}) as forger:
                    assert await whoami(forger) is None
            # a pending sign-in cookie is signed with the same key, yet is no session
            async with httpx.AsyncClient(base_url=gw.url) as starter:
                await to_provider(starter)
                pending = starter.cookies[OIDC_COOKIE]
            async with httpx.AsyncClient(base_url=gw.url, cookies={COOKIE: pending}) as forger:
                assert await whoami(forger) is None

            out = await browser.post("/logout", json={})
            assert out.status_code == 200
            assert out.json() == {"status": "signed out", "next": "/login?signed_out=1"}
            after = await browser.get("/login?signed_out=1", headers={"Accept": "text/html"})
            assert after.status_code == 200 and "signed out" in after.text
        # the old cookie, kept by someone, no longer counts
        async with httpx.AsyncClient(base_url=gw.url, cookies={COOKIE: cookie}) as replay:
            assert await whoami(replay) is None
        assert ("web.sign_out", "ok", "dan", None) in await audit(gw)


async def test_an_unreachable_provider_is_a_clear_502(database_url: str) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    async with (
        oidc_gateway(database_url, closed) as gw,
        httpx.AsyncClient(base_url=gw.url) as browser,
    ):
        answer = await browser.get("/login", headers={"Accept": "text/html"})
        assert answer.status_code == 502
        assert "the sign-in provider did not answer" in answer.text
        assert OIDC_COOKIE not in answer.cookies


OIDC_SETTINGS = {
    "GATEWAY_WEB_AUTH": "oidc",
    "GATEWAY_OIDC_ISSUER": "https://id.example.com",
    "GATEWAY_OIDC_CLIENT_ID": "chat",
    "GATEWAY_PUBLIC_URL": "https://chat.example.com",
    "GATEWAY_OIDC_ALLOWED_DOMAINS": "example.com",
}


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"GATEWAY_OIDC_ISSUER": ""}, "GATEWAY_OIDC_ISSUER"),
        ({"GATEWAY_OIDC_ISSUER": "id.example.com"}, "GATEWAY_OIDC_ISSUER"),
        ({"GATEWAY_OIDC_CLIENT_ID": ""}, "GATEWAY_OIDC_CLIENT_ID"),
        ({"GATEWAY_PUBLIC_URL": ""}, "GATEWAY_PUBLIC_URL"),
        ({"GATEWAY_PUBLIC_URL": "chat.example.com"}, "GATEWAY_PUBLIC_URL"),
        ({"GATEWAY_OIDC_ALLOWED_DOMAINS": ""}, "GATEWAY_OIDC_ALLOWED_DOMAINS"),
        ({"GATEWAY_OIDC_ALLOWED_DOMAINS": "ann@example.com"}, "GATEWAY_OIDC_ALLOWED_DOMAINS"),
        ({"GATEWAY_OIDC_SCOPES": "email profile"}, "GATEWAY_OIDC_SCOPES"),
    ],
)
def test_an_incomplete_oidc_setup_is_a_config_error(change: dict[str, str], setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        # what load_settings does: a validation error becomes one ConfigError naming it
        parsed(lambda: make_settings("postgresql://x/y", **{**OIDC_SETTINGS, **change}))
    assert info.value.setting == setting


def test_a_complete_oidc_setup_is_accepted_and_keeps_its_secret() -> None:
    settings = make_settings(
        "postgresql://x/y",
        **{
            **OIDC_SETTINGS,
            "GATEWAY_HTTP_HOST": "0.0.0.0",  # sign-in, so a public bind is fine
            "GATEWAY_OIDC_ALLOWED_DOMAINS": "",
            "GATEWAY_OIDC_ALLOWED_GROUPS": "chat-users, staff",
            "GATEWAY_OIDC_CLIENT_SECRET": "s3cret-value",
            "GATEWAY_OIDC_ISSUER": "https://tenant.id.example.com/",
            "GATEWAY_PUBLIC_URL": "https://chat.example.com/",
        },
    )
    assert settings.gateway_oidc_allowed_groups == ["chat-users", "staff"]
    # an issuer is kept exactly (its tokens' iss must equal it); the public URL is a base
    assert settings.gateway_oidc_issuer == "https://tenant.id.example.com/"
    assert settings.gateway_public_url == "https://chat.example.com"
    assert "s3cret-value" not in repr(settings) and "s3cret-value" not in str(settings)


async def test_gateway_run_exits_2_naming_the_missing_oidc_setting(tmp_path: Path) -> None:
    env = {"GATEWAY_DATA_DIR": str(tmp_path), **OIDC_SETTINGS, "GATEWAY_OIDC_CLIENT_ID": ""}
    code, _, err = await run_cli(["run"], env)
    assert code == 2 and "GATEWAY_OIDC_CLIENT_ID" in err, err
