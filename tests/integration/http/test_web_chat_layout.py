"""The web chat in Debian's chromium at a phone's width (360 px) and at desktop width: the
message pane is visible, the thread list is reachable, a reply's Markdown is rendered by the
vendored markdown-it (bold, code blocks) while raw HTML from a message is shown as text and
never run, the thumbs are SVG, the favicon is served, the typing indicator comes and goes, and
an answer's file shows inline.

Screenshots go to ``$WEB_CHAT_SCREENSHOTS`` when set (to look at them), else a tmp dir."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

import httpx
from playwright.async_api import Browser, Page, ViewportSize, expect

from gateway.agents.base import Turn
from gateway.core.domain import OutgoingFile, Reply
from tests.integration.http.test_browser import TIMEOUT_MS, _record_errors, browser  # noqa: F401 - fixture
from testsupport.harness import running_gateway

PHONE: ViewportSize = {"width": 360, "height": 740}
#: a 1x1 PNG: an answer's file, shown inline
PIXEL = OutgoingFile(
    name="pixel.png",
    mime_type="image/png",
    data=base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    ),
    caption="a pixel",
)
DESKTOP: ViewportSize = {"width": 1280, "height": 800}


class MarkdownAgent:
    """Answers in Markdown, quoting the question (which may hold HTML), after a short think,
    or, given ``seen``, once the test has seen the typing indicator: a fixed think was
    sometimes over before a loaded machine's page had even subscribed to the thread, and the
    indicator never showed."""

    name = "markdown"

    def __init__(self, seen: asyncio.Event | None = None) -> None:
        self._seen = seen

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        if self._seen is None:
            await asyncio.sleep(1.0)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._seen.wait(), 30)
        asked = turn.new_messages[-1].content
        text = (
            f"**Bold** answer to: {asked}\n\n"
            "- one\n- two with `inline`\n\n"
            "```python\nprint('hi')  # <b>not bold</b>\n```\n\n"
            "<script>window.pwnedByReply = 1</script> [js](javascript:alert(1))"
        )
        return [Reply(text=text, model="md-model", files=(PIXEL,))]


def shots_dir(tmp_path: Path) -> Path:
    path = Path(os.environ.get("WEB_CHAT_SCREENSHOTS") or tmp_path)
    path.mkdir(parents=True, exist_ok=True)
    return path


async def no_horizontal_scroll(page: Page) -> bool:
    return bool(
        await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    )


async def test_markdown_reply_on_desktop_and_phone(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> None:
    shots = shots_dir(tmp_path)
    seen = asyncio.Event()
    async with running_gateway(database_url, agent=MarkdownAgent(seen)) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as client:
            icon = await client.get("/favicon.ico")
            assert icon.status_code == 200
            assert icon.headers["content-type"].startswith("image/svg+xml")
            page_response = await client.get("/")
            assert "script-src 'self'" in page_response.headers["content-security-policy"]
            assert (await client.get("/web/static/nope.js")).status_code == 404

        desktop = await browser.new_page(viewport=DESKTOP)
        desktop.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(desktop, errors)
        phone: Page | None = None
        try:
            await desktop.goto(gw.url)
            await desktop.fill("#text", "what is <script>window.pwnedByUser = 1</script>?")
            await desktop.press("#text", "Enter")
            await expect(desktop.locator("#typing")).to_have_text("assistant is typing…")
            seen.set()
            reply = desktop.locator(".msg.assistant .body").first
            await expect(reply.locator("strong")).to_have_text("Bold")
            await expect(desktop.locator("#typing")).to_have_text("")
            await expect(reply.locator("pre code")).to_have_text("print('hi')  # <b>not bold</b>\n")
            await expect(reply.locator("li code")).to_have_text("inline")
            # raw HTML in the reply and in the quoted question is text, never markup
            await expect(reply).to_contain_text("<script>window.pwnedByReply = 1</script>")
            await expect(reply).to_contain_text("what is <script>window.pwnedByUser = 1</script>?")
            assert await reply.locator("script, b").count() == 0
            assert await reply.locator("a").count() == 0  # javascript: is not a link
            user = desktop.locator(".msg.user .body").first
            await expect(user).to_have_text("what is <script>window.pwnedByUser = 1</script>?")
            assert await desktop.evaluate(
                "window.pwnedByUser === undefined && window.pwnedByReply === undefined"
            )
            # the answer's file arrives after its text, inline (a picture and its download link)
            card = desktop.locator(".msg.file")
            await expect(card.locator("a.download")).to_have_text("pixel.png")
            await expect(card.locator(".body")).to_have_text("a pixel")
            await expect(card.locator("img")).to_have_count(1)
            assert await card.locator("img").evaluate(
                "img => img.complete && img.naturalWidth === 1"
            )
            # thumbs drawn as SVG (no emoji font needed)
            thumbs = desktop.locator(".msg.assistant .fb button")
            await expect(thumbs).to_have_count(2)
            await expect(thumbs.locator("svg")).to_have_count(2)
            # desktop: all three panes side by side
            for selector in ("nav", "#threads", "#log"):
                await expect(desktop.locator(selector)).to_be_visible()
            await expect(desktop.locator("#show-list")).to_be_hidden()
            await desktop.screenshot(path=str(shots / "web-chat-desktop.png"), full_page=True)
            thread_url = desktop.url

            # the phone, opened on the same thread
            phone = await browser.new_page(viewport=PHONE, is_mobile=True, has_touch=True)
            phone.set_default_timeout(TIMEOUT_MS)
            _record_errors(phone, errors)
            await phone.goto(thread_url)
            log = phone.locator("#log")
            await expect(log).to_be_visible()
            await expect(phone.locator(".msg.assistant .body strong").first).to_have_text("Bold")
            await expect(phone.locator(".msg.assistant .body pre code").first).to_be_visible()
            await expect(phone.locator("#composer textarea")).to_be_visible()
            # a fresh page (a reload): the answer's file comes with the history, once
            await expect(phone.locator(".msg.file img")).to_have_count(1)
            box = await log.bounding_box()
            assert box is not None and box["width"] >= 320, box
            assert await no_horizontal_scroll(phone)
            await phone.screenshot(path=str(shots / "web-chat-360-conversation.png"))

            # the thread list is one tap away, and a thread brings the conversation back
            await phone.click("#show-list")
            await expect(phone.locator("#thread-list button.thread")).to_have_count(1)
            await expect(phone.locator("#thread-list")).to_be_visible()
            await expect(log).to_be_hidden()
            assert await no_horizontal_scroll(phone)
            await phone.screenshot(path=str(shots / "web-chat-360-threads.png"))
            await phone.click("#thread-list button.thread")
            await expect(log).to_be_visible()
            await expect(phone.locator("#thread-list")).to_be_hidden()
        finally:
            # the pages hold live streams open; close them before the gateway drains
            await desktop.close()
            if phone is not None:
                await phone.close()
    assert errors == []


async def test_a_session_that_does_not_exist_shows_a_clean_empty_state(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
) -> None:
    async with running_gateway(database_url) as gw:
        page = await browser.new_page(viewport=PHONE)
        page.set_default_timeout(TIMEOUT_MS)
        script_errors: list[str] = []
        page.on("pageerror", lambda exc: script_errors.append(str(exc)))
        try:
            await page.goto(f"{gw.url}ops/sessions/424242")
            await expect(page.locator("#session-title")).to_have_text("No such session")
            facts = page.locator("#session-facts")
            await expect(facts).to_contain_text("There is no session 424242")
            await expect(facts.locator("a")).to_have_attribute("href", "/ops")
            await expect(page.locator("#transcript")).to_be_hidden()
            await expect(page.locator("#notice")).to_have_text("")
            # it stays that way: the 2 s refresh does not bring an error back
            await asyncio.sleep(2.5)
            await expect(page.locator("#notice")).to_have_text("")
            await expect(page.locator("#session-title")).to_have_text("No such session")
        finally:
            await page.close()
    assert script_errors == []
