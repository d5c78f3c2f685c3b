"""The web chat and the operator pages in a real headless browser (Debian's chromium driven
by Playwright): send a message, see the reply, then find the session on the operator pages
and see where that reply went and that it was delivered."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from gateway.agents.base import Turn
from gateway.core.domain import Reply
from gateway.runtime.gateway import Gateway
from testsupport.harness import running_gateway

TIMEOUT_MS = 15_000
expect.set_options(timeout=TIMEOUT_MS)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


class CountingAgent:
    """Echoes, naming its model and the tokens it used (the page shows both)."""

    name = "counting"

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        text = turn.new_messages[-1].content
        return [Reply(text=f"echo: {text}", model="test-model", tokens_used=len(text.split()))]


def _chromium() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    path = _chromium()
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium; .ci/run does)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=path, args=FLAGS)
        try:
            yield browser
        finally:
            await browser.close()


def _record_errors(page: Page, errors: list[str]) -> None:
    """Script errors and failed requests (but the browser's own favicon probe)."""
    page.on("pageerror", lambda exc: errors.append(f"script error: {exc}"))
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.url}")
            if r.status >= 400 and not r.url.endswith("/favicon.ico")
            else None
        ),
    )


async def test_a_web_chat_reply_and_its_delivery_on_the_operator_pages(
    database_url: str, browser: Browser
) -> None:
    async with running_gateway(database_url, agent=CountingAgent()) as gw:
        page = await browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(page, errors)
        try:
            await _walk_through(gw, page, database_url)
        finally:
            # the pages hold live streams open; close them before the gateway drains
            await page.close()
    assert errors == []


async def _walk_through(gw: Gateway, page: Page, database_url: str) -> None:
    # 1. the web chat: send, see the reply in the thread
    await page.goto(gw.url)
    await page.fill("#text", "hello from the browser")
    await page.press("#text", "Enter")
    reply = page.locator(".msg.assistant .body", has_text="echo: hello from the browser")
    await expect(reply).to_be_visible()
    # user content is text, never markup
    await page.fill("#text", '<img src=x onerror="window.pwned=1"> **bold**')
    await page.press("#text", "Enter")
    await expect(page.locator(".msg.assistant .body").nth(1)).to_contain_text("<img src=x")

    # someone liked the first reply (reactions are stored as the message's feedback)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE messages SET feedback = 1 WHERE seq_no = 2")
    finally:
        await conn.close()

    # 2. the sessions page: live counts, filter, open the session
    await page.goto(f"{gw.url}ops")
    await expect(page.locator("#count-active")).to_have_text("1")
    await page.fill("#f-q", "hello from")
    await page.click("#filters button:not([type])")
    row = page.locator("#session-rows tr.row", has_text="hello from the browser")
    await expect(row).to_have_count(1)
    # the profile in force in the session's place (no config file: the built-in default)
    await expect(row.locator("td.profile")).to_have_text("default")
    await row.click()
    await page.wait_for_url("**/ops/sessions/*")

    # 3. the session page: each reply with its delivery status, target and model
    first = page.locator(".msg.assistant").first
    await expect(first.locator(".body")).to_have_text("echo: hello from the browser")
    status = first.locator(".delivery-status")
    await expect(status).to_have_attribute("data-status", "sent")
    await expect(first.locator(".target")).to_contain_text("web · chat general · thread")
    await expect(first.locator(".model")).to_have_text("model test-model")
    await expect(first.locator(".profile")).to_have_text("profile default")
    await expect(first.locator(".tokens")).to_have_text("4 tokens")
    await expect(first.locator(".feedback")).to_have_text("feedback 👍")
    user = page.locator(".msg.user").nth(1)
    await expect(user.locator(".body")).to_have_text(
        '<img src=x onerror="window.pwned=1"> **bold**'
    )
    assert await page.evaluate("window.pwned === undefined")
    assert await page.locator("#transcript img").count() == 0

    # 4. a message appended by an operator shows up live with its own delivery
    session_id = int(page.url.rsplit("/", 1)[1])
    await gw.operator.service.append(
        session_id, participant="operator", content="a human steps in", deliver=True
    )
    added = page.locator(".msg.assistant", has_text="a human steps in")
    await expect(added.locator(".delivery-status")).to_have_attribute("data-status", "sent")
    await expect(added).to_contain_text("as operator")
