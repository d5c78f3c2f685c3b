"""What a new user meets in the web chat in their first hour, in a real browser (Debian's
chromium driven by Playwright, as the other browser tests do): the page says when answers come
from the built-in echo agent, there is no "Sign out" without a sign-in, ``/new`` keeps the
thread's earlier messages in view, the private channel is in the sidebar, and a locked-out
sign-in says how long to wait."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Browser, Page, expect

from gateway.http.webauth import MAX_FAILURES, hash_password
from session_store.repos.accounts import AccountStore
from tests.integration.http.test_browser import TIMEOUT_MS, CountingAgent, _record_errors, browser
from testsupport.harness import running_gateway

__all__ = ["browser"]  # the fixture, shared with test_browser


@asynccontextmanager
async def _page(browser: Browser, errors: list[str]) -> AsyncIterator[Page]:
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    _record_errors(page, errors)
    try:
        yield page
    finally:
        # the page holds a live stream open; close it before the gateway drains
        await context.close()


async def _say(page: Page, text: str, answer: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")
    await expect(page.locator(".msg.assistant .body", has_text=answer).last).to_be_visible()


async def _sign_in(page: Page, password: str) -> int:
    await page.fill("#password", password)
    async with page.expect_response(lambda r: r.url.endswith("/login")) as answered:
        await page.click("#login button")
    return (await answered.value).status


async def test_the_lockout_on_the_sign_in_page_says_how_long_to_wait(
    database_url: str, browser: Browser
) -> None:
    errors: list[str] = []
    async with (
        running_gateway(database_url, GATEWAY_WEB_AUTH="accounts") as gw,
        _page(browser, errors) as page,
    ):
        await AccountStore(gw.store.db).add("ann", hash_password("correct horse"))
        await page.goto(f"{gw.url}login")
        await page.fill("#name", "ann")
        for _ in range(MAX_FAILURES):
            assert await _sign_in(page, "wrong password") == 401
        assert await _sign_in(page, "correct horse") == 429
        await expect(page.locator("#error")).to_have_text(
            "Too many attempts: try again in 5 minutes"
        )


async def test_the_page_says_when_the_echo_agent_answers(
    database_url: str, browser: Browser
) -> None:
    errors: list[str] = []
    # zero config: the built-in echo agent answers, and the page says how to connect a model
    async with running_gateway(database_url) as gw, _page(browser, errors) as page:
        await page.goto(gw.url)
        notice = page.locator("#agent-notice")
        await expect(notice).to_be_visible()
        await expect(notice).to_contain_text("built-in echo agent")
        await expect(notice).to_contain_text("AGENT=openai")
        await expect(notice).to_contain_text("OPENAI_BASE_URL")
        await expect(notice).to_contain_text("AGENT_MODEL")
        await _say(page, "hello", "echo: hello")
    # a model configured: no notice
    async with (
        running_gateway(
            database_url,
            agent=CountingAgent(),
            AGENT="openai",
            OPENAI_BASE_URL="http://127.0.0.1:9/v1",
            AGENT_MODEL="test-model",
        ) as gw,
        _page(browser, errors) as page,
    ):
        await page.goto(gw.url)
        await _say(page, "hello again", "echo: hello again")
        await expect(page.locator("#agent-notice")).to_be_hidden()
    assert errors == []


async def test_no_sign_out_without_a_sign_in(database_url: str, browser: Browser) -> None:
    errors: list[str] = []
    async with running_gateway(database_url) as gw, _page(browser, errors) as page:
        await page.goto(gw.url)
        await expect(page.locator("#me")).to_have_text("local")
        await expect(page.locator("#sign-out")).to_be_hidden()
        # /logout typed by hand (or from an old bookmark) lands on the chat, not on a raw 404
        await page.goto(f"{gw.url}logout")
        await page.wait_for_url(gw.url)
        await expect(page.locator("#me")).to_have_text("local")
        assert "Not Found" not in await page.content()
    assert errors == []


async def test_new_keeps_the_threads_earlier_messages_in_view(
    database_url: str, browser: Browser
) -> None:
    errors: list[str] = []
    async with running_gateway(database_url) as gw, _page(browser, errors) as page:
        await page.goto(gw.url)
        await _say(page, "before the restart", "echo: before the restart")
        await _say(page, "/new", "Started a new session")
        await _say(page, "after the restart", "echo: after the restart")
        log = page.locator("#log")
        # the earlier session stays above a divider; the new one follows it
        await expect(log.locator(".msg.user .body")).to_have_text(
            ["before the restart", "/new", "after the restart"]
        )
        await expect(log.locator(".divider")).to_have_count(1)
        await expect(log.locator(".divider")).to_contain_text("new session")
        order = await log.evaluate(
            "log => [...log.children].map(e => e.classList.contains('divider') ? '---' "
            ": e.querySelector('.body') ? e.querySelector('.body').textContent : '')"
        )
        assert order.index("---") > order.index("before the restart")
        assert order.index("---") < order.index("after the restart")
        # and so after a reload
        await page.reload()
        await expect(log.locator(".msg.user .body").first).to_have_text("before the restart")
        await expect(log.locator(".divider")).to_have_count(1)
    assert errors == []


async def test_the_private_channel_is_in_the_sidebar(database_url: str, browser: Browser) -> None:
    errors: list[str] = []
    async with (
        running_gateway(database_url, GATEWAY_WEB_AUTH="accounts") as gw,
        _page(browser, errors) as page,
    ):
        await AccountStore(gw.store.db).add("ann", hash_password("correct horse"))
        await page.goto(f"{gw.url}login")
        await page.fill("#name", "ann")
        assert await _sign_in(page, "correct horse") == 200
        await page.wait_for_url(gw.url)
        mine = page.locator("#channels button", has_text="~ann")
        await expect(mine).to_be_visible()
        await mine.click()
        await expect(page.locator("#title")).to_have_text("#~ann")
        await _say(page, "a note to self", "echo: a note to self")
        assert page.url.split("#", 1)[1].startswith("~ann/")
        # still there after a reload, and never listed among the shared channels
        await page.goto(gw.url)
        await expect(page.locator("#channels button", has_text="~ann")).to_have_count(1)
    assert errors == []
