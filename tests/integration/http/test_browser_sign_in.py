"""Web chat sign-in in a real browser (Debian's chromium driven by Playwright, as the /ops
test does): sign in, chat in two threads, sign out; after sign-out the transcript API answers
401 to the same browser."""

from __future__ import annotations

from playwright.async_api import Browser, Page, expect

from gateway.http.webauth import COOKIE, hash_password
from session_store.repos.accounts import AccountStore
from tests.integration.http.test_browser import TIMEOUT_MS, CountingAgent, _record_errors, browser
from testsupport.harness import running_gateway

__all__ = ["browser"]  # the fixture, shared with test_browser


async def _say(page: Page, text: str) -> None:
    await page.fill("#text", text)
    await page.press("#text", "Enter")
    reply = page.locator(".msg.assistant .body", has_text=f"echo: {text}")
    await expect(reply).to_be_visible()


async def test_sign_in_chat_in_two_threads_sign_out(database_url: str, browser: Browser) -> None:
    async with running_gateway(
        database_url, agent=CountingAgent(), GATEWAY_WEB_AUTH="accounts"
    ) as gw:
        await AccountStore(gw.store.db).add("ann", hash_password("correct horse"))
        context = await browser.new_context()
        page = await context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(page, errors)
        try:
            # signed out, the chat sends you to the sign-in page
            await page.goto(gw.url)
            await page.wait_for_url("**/login")
            await page.fill("#name", "ann")
            await page.fill("#password", "wrong password")
            await page.click("#login button")
            await expect(page.locator("#error")).to_have_text("wrong name or password")
            errors.clear()  # that 401 was the point
            await page.fill("#password", "correct horse")
            await page.click("#login button")
            await page.wait_for_url(gw.url)
            await expect(page.locator("#me")).to_have_text("ann")
            [cookie] = [c for c in await context.cookies() if c["name"] == COOKIE]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"

            # two threads, each with its own reply
            await _say(page, "first thread")
            first = page.url.rsplit("/", 1)[1]
            await page.click("#new-thread")
            await _say(page, "second thread")
            second = page.url.rsplit("/", 1)[1]
            assert first != second
            await expect(page.locator("#thread-list button.thread")).to_have_count(2)
            await expect(page.locator(".msg.user .who").first).to_have_text("ann")
            transcript = f"{gw.url}web/api/channels/general/threads/{first}/messages"
            before = await page.request.get(transcript)
            assert before.status == 200
            assert (await before.json())["messages"][0]["content"] == "first thread"
            assert errors == []

            # sign out: back to the sign-in page, and the same browser reads nothing more
            await page.click("#sign-out")
            await page.wait_for_url("**/login")
            after = await page.request.get(transcript)
            assert after.status in (401, 403)
            assert "first thread" not in await after.text()
        finally:
            await context.close()
