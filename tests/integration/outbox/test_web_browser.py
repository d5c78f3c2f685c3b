"""The web chat in Debian's chromium: a streamed answer appears in the page, rendered as
Markdown, while the model is still writing it (the fake model server has not finished the
request), and is replaced by the one stored reply at the end. At a phone's width, too.

Screenshots go to ``$WEB_CHAT_SCREENSHOTS`` when set, else a tmp dir."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from gateway.agents.openai import OpenAIAgent
from tests.integration.http.test_browser import TIMEOUT_MS, _record_errors, browser  # noqa: F401 - fixture
from tests.integration.http.test_web_chat_layout import DESKTOP, shots_dir
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import running_gateway

ANSWER = "**Streaming** in the web chat: " + " ".join(f"token{n}" for n in range(50)) + "."


async def test_streamed_text_shows_before_the_stream_ends(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
    fake: FakeOpenAI,
    tmp_path: Path,
) -> None:
    shots = shots_dir(tmp_path)
    fake.script.append(Step(text=ANSWER, chunk_chars=8, chunk_delay=0.15))
    async with running_gateway(
        database_url,
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        AGENT_MODEL="small",
        GATEWAY_TOOLS=False,
        GATEWAY_STREAM_EDIT_SECONDS=0.2,
    ) as gw:
        page = await browser.new_page(viewport=DESKTOP)
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(page, errors)
        try:
            await page.goto(gw.url)
            await page.fill("#text", "stream please")
            await page.press("#text", "Enter")
            preview = page.locator(".msg.assistant.preview .body")
            await expect(preview.locator("strong")).to_have_text("Streaming")
            # visible while the model server is still sending the answer
            [request] = fake.turn_requests
            assert request.finished is None, "the stream had already ended"
            shown = await preview.inner_text()
            assert shown.strip() and "token49" not in shown
            await page.screenshot(path=str(shots / "web-chat-streaming.png"))
            # the stored reply replaces the preview: one answer, complete
            final = page.locator(".msg.assistant:not(.preview) .body")
            await expect(final).to_contain_text("token49.")
            await expect(page.locator(".msg.assistant.preview")).to_have_count(0)
            await expect(page.locator(".msg.assistant")).to_have_count(1)
            await expect(final.locator("strong")).to_have_text("Streaming")
            assert request.finished is not None
        finally:
            await page.close()
    assert errors == []
