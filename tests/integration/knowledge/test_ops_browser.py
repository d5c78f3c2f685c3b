"""/ops/kb in a real headless browser: upload a file, watch it become ready, search it,
delete it."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from tests.integration.http.test_browser import _record_errors, browser  # noqa: F401 (the fixture)
from testsupport.documents import make_pdf
from testsupport.harness import running_gateway


async def test_upload_search_and_delete_from_the_ops_page(
    database_url: str,
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    pdf = tmp_path / "policy.pdf"
    pdf.write_bytes(make_pdf(["Welcome.", "Refunds are paid within thirty days."]))
    async with running_gateway(database_url, web_chat=False) as gw:
        page = await browser.new_page()
        errors: list[str] = []
        _record_errors(page, errors)
        page.on("dialog", lambda dialog: dialog.accept())
        await page.goto(f"{gw.url}ops/kb")
        await page.set_input_files("#file", str(pdf))
        await page.click("#upload button")
        row = page.locator("#doc-rows tr", has_text="policy.pdf")
        await expect(row.locator(".badge")).to_have_text("ready")
        await page.fill("#q", "when are refunds paid")
        await page.click("#search button")
        await expect(page.locator("#hit-rows tr").first).to_contain_text("policy.pdf, p. 2")
        await row.get_by_role("button", name="Delete").click()
        await expect(page.locator("#doc-rows tr")).to_have_count(0)
        assert errors == []


async def test_the_web_chat_upload_button_shares_a_file_with_the_thread(
    database_url: str,
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Office\n\nThe office opens at nine.")
    async with running_gateway(database_url) as gw:
        page = await browser.new_page()
        errors: list[str] = []
        _record_errors(page, errors)
        await page.goto(gw.url)
        await page.set_input_files("#file", str(notes))
        await expect(page.locator("#upload-note")).to_contain_text("notes.md")
        # the new thread was opened with a message naming the file; the gateway says when
        # the file has been read
        await expect(page.locator("body")).to_contain_text("📄 notes.md is ready")
        docs = await gw.knowledge.store.list_documents()
        assert [(d.name, d.kb_name.startswith("thread:web:local:general:")) for d in docs] == [
            ("notes.md", True)
        ]
        assert errors == []


async def test_assign_and_unassign_a_base_from_the_ops_page(
    database_url: str,
    browser: Browser,  # noqa: F811
) -> None:
    async with running_gateway(database_url, web_chat=False) as gw:
        page = await browser.new_page()
        errors: list[str] = []
        _record_errors(page, errors)
        await page.goto(f"{gw.url}ops/kb")
        await page.fill("#assign-kb", "runbook")
        await page.fill("#assign-chat", "slack:T1:C1")
        await page.click("#assign button")
        row = page.locator("#assign-rows tr", has_text="slack:T1:C1")
        await expect(row).to_contain_text("runbook")
        assert [a.chat for a in await gw.knowledge.store.assignments()] == ["slack:T1:C1"]
        await row.get_by_role("button", name="Unassign").click()
        await expect(page.locator("#assign-rows tr")).to_have_count(0)
        assert await gw.knowledge.store.assignments() == []
        assert errors == []
