"""``/ops/audit`` in Debian's chromium: the events the gateway recorded are listed newest
first with actor, action, object, outcome and origin; text from the events is shown as text;
the action filter narrows the list. The screenshot goes to ``$AUDIT_SCREENSHOTS`` when set
(the docs' picture), else a tmp dir."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from playwright.async_api import Browser, expect

from gateway import audit
from tests.integration.http.test_browser import TIMEOUT_MS, _record_errors, browser  # noqa: F401
from testsupport.harness import running_gateway


async def test_the_audit_page_lists_and_filters_events(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> None:
    shots = Path(os.environ.get("AUDIT_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    async with running_gateway(database_url) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as c:
            upload = await c.post(
                "/api/v1/kb/documents",
                params={"name": "handbook.md"},
                content=b"# Handbook\n\nOn-call rota and escalation.\n",
                headers={"Content-Type": "application/octet-stream"},
            )
            assert upload.status_code == 200
            doc = upload.json()["document"]["id"]
            assert (await c.delete(f"/api/v1/kb/documents/{doc}")).status_code == 204
            assert (await c.post("/api/v1/deliveries/42/retry")).status_code == 404
        await audit.record(
            gw.store,
            "web.sign_in",
            ("web.account", "ann"),
            outcome="denied",
            reason="wrong name or password",
            actor="web:ann",
            surface="web",
            remote_addr="203.0.113.7",
        )
        await audit.record(
            gw.store,
            "tool.approval.approve",
            ("tool.approval", "Xy3-approval"),
            actor="slack:U024BE7LH",
            surface="slack",
            details={"tool": "restart_service", "session_id": 12},
        )
        await audit.record(
            gw.store,
            "web.account.add",
            ("web.account", "<b>bob</b>"),
            actor="cli:alice",
            surface="cli",
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 560})
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        _record_errors(page, errors)
        try:
            await page.goto(f"{gw.url}ops/audit")
            rows = page.locator("#audit-rows tr")
            await expect(rows).to_have_count(6)
            await expect(rows.first).to_contain_text("web.account.add")
            # text from an event is text, never markup
            await expect(rows.first).to_contain_text("<b>bob</b>")
            assert await page.locator("#audit-rows b").count() == 0
            await expect(page.locator("#audit-rows")).to_contain_text("203.0.113.7")
            await expect(page.locator("#audit-rows")).to_contain_text("wrong name or password")
            await page.screenshot(path=str(shots / "ops_audit.png"), full_page=True)
            await page.fill("#f-action", "kb")
            await page.click("#filters button")
            await expect(rows).to_have_count(2)
            await expect(rows.first).to_contain_text("kb.document.delete")
            assert errors == []
        finally:
            await page.close()
