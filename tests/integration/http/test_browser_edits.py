"""The web chat's edit and delete buttons in a real headless browser: a person fixes their
question after its answer and sees the answer follow it in place, then deletes it and sees it
go (the answer stays: ``on_delete = "keep"``)."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.integration.http.test_browser import TIMEOUT_MS, CountingAgent, _record_errors
from tests.integration.http.test_browser import browser as browser
from testsupport.harness import running_gateway


async def test_a_person_edits_then_deletes_their_question(
    database_url: str,
    browser: Browser,
) -> None:
    async with running_gateway(database_url, agent=CountingAgent()) as gw:
        page = await browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(page, errors)
        page.on("dialog", lambda dialog: dialog.accept())  # "Delete this message?"
        try:
            await page.goto(gw.url)
            await page.fill("#text", "what colour is mars")
            await page.press("#text", "Enter")
            answers = page.locator(".msg.assistant .body")
            await expect(answers).to_have_text(["echo: what colour is mars"])

            mine = page.locator(".msg.user", has_text="what colour is mars")
            await mine.locator(".own button", has_text="edit").click()
            editing = page.locator(".msg.user", has=page.locator("textarea"))
            await editing.locator("textarea").fill("what color is mars")
            await editing.locator(".own button", has_text="save").click()
            # the same answer, rewritten in place for the edited question
            await expect(answers).to_have_text(["echo: what color is mars"])
            edited = page.locator(".msg.user", has_text="what color is mars")
            await expect(edited.locator(".who")).to_contain_text("edited")

            await edited.locator(".own button", has_text="delete").click()
            await expect(page.locator(".msg.user")).to_have_count(0)
            await expect(answers).to_have_text(["echo: what color is mars"])
        finally:
            await page.close()
    assert errors == []
