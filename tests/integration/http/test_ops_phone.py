"""Every operator page on a phone (375 px wide, in Debian's chromium), signed in with the admin
token and showing real rows: nothing runs off the right edge, the page never scrolls
sideways (a wide table scrolls inside its own box), and the navigation stays reachable.

Screenshots go to ``$OPS_SCREENSHOTS`` when set (to look at them), else a tmp dir."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from playwright.async_api import Browser, ViewportSize, expect
from starlette.routing import Route

from gateway import audit
from tests.integration.http.test_browser import TIMEOUT_MS, _record_errors, browser  # noqa: F401
from testsupport.harness import running_gateway

PHONE: ViewportSize = {"width": 375, "height": 740}
TOKEN = "phone-test-admin-token-0123456789abcdef"
#: the operator pages; ``{session}`` is the session the test makes
PAGES = ["/ops", "/ops/sessions/{session}", "/ops/kb", "/ops/usage", "/ops/schedules", "/ops/audit"]
#: the routes under /ops that are not pages
NOT_PAGES = ("/ops/static/{name}",)


async def test_every_operator_page_fits_a_phone(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> None:
    shots = Path(os.environ.get("OPS_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    async with running_gateway(database_url, GATEWAY_ADMIN_TOKEN=TOKEN) as gw:
        # every page the gateway serves under /ops is in the list
        served = {
            r.path
            for r in gw.app.routes
            if isinstance(r, Route) and r.path.startswith("/ops") and not r.path.endswith(".js")
        }
        assert served - set(NOT_PAGES) <= set(PAGES), served
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=gw.url, headers=headers) as c:
            # rows with long values: a document, a schedule, a session with a long key
            upload = await c.post(
                "/api/v1/kb/documents",
                params={"name": "on-call-handbook-with-a-rather-long-file-name-2026.md"},
                content=b"# Handbook\n\nOn-call rota and escalation.\n",
                headers={"Content-Type": "application/octet-stream"},
            )
            assert upload.status_code == 200, upload.text
            schedule = await c.post(
                "/api/v1/schedules",
                json={
                    "place": "web:local:general",
                    "cron": "0 9 * * 1-5",
                    "prompt": "Summarise yesterday's incidents and the open follow-ups, "
                    "with owners and due dates",
                },
            )
            assert schedule.status_code in (200, 201), schedule.text
        await audit.record(
            gw.store,
            "tool.approval.approve",
            ("tool.approval", "Xy3-approval-0123456789abcdef"),
            actor="slack:U024BE7LH",
            surface="slack",
            details={"tool": "restart_service", "session_id": 1, "reason": "x" * 120},
        )
        page = await browser.new_page(viewport=PHONE, is_mobile=True, has_touch=True)
        page.set_default_timeout(TIMEOUT_MS)
        await page.add_init_script(f"sessionStorage.setItem('chat-gateway-admin-token', {TOKEN!r})")
        errors: list[str] = []
        _record_errors(page, errors)
        wide: dict[str, int] = {}
        cut_off: list[str] = []
        try:
            # a session, the way a person makes one: a question in the web chat, answered
            chat = await browser.new_page()
            try:
                await chat.goto(gw.url)
                question = "Which payments-platform incidents from last week are still open?"
                await chat.fill("#text", question)
                await chat.press("#text", "Enter")
                await expect(chat.locator(".msg.assistant .body")).to_contain_text(question)
            finally:
                await chat.close()
            async with httpx.AsyncClient(base_url=gw.url, headers=headers) as c:
                listed = (await c.get("/api/v1/sessions")).json()["items"]
            session = listed[0]["id"]
            for path in PAGES:
                url = gw.url.rstrip("/") + path.format(session=session)
                await page.goto(url)
                await page.wait_for_load_state("networkidle")
                # signed in: the token form stays hidden, the page's rows are there
                await expect(page.locator("#auth")).to_be_hidden()
                await expect(page.locator("header.top")).to_be_visible()
                name = path.strip("/").replace("/", "-").replace("{session}", "session")
                await page.screenshot(path=str(shots / f"{name}-375.png"), full_page=True)
                width = await page.evaluate("document.documentElement.scrollWidth")
                if width > PHONE["width"]:
                    wide[path] = int(width)
                # every navigation link can be tapped without scrolling sideways
                for link in await page.locator("header.top a").all():
                    box = await link.bounding_box()
                    assert box is not None
                    if box["x"] + box["width"] > PHONE["width"]:
                        cut_off.append(f"{path}: {await link.text_content()}")
        finally:
            await page.close()
    assert wide == {}, f"pages wider than the phone (scrollWidth): {wide}"
    assert cut_off == [], f"navigation links off the right edge: {cut_off}"
    assert errors == []


async def test_the_web_chat_composer_shows_its_whole_hint_on_a_phone(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
    tmp_path: Path,
) -> None:
    shots = Path(os.environ.get("OPS_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    async with running_gateway(database_url) as gw:
        page = await browser.new_page(viewport=PHONE, is_mobile=True, has_touch=True)
        page.set_default_timeout(TIMEOUT_MS)
        try:
            await page.goto(gw.url)
            if await page.locator("#text").is_hidden():  # the phone opens on the thread list
                await page.click("#new-thread")
            box = page.locator("#text")
            await expect(box).to_be_visible()
            await page.screenshot(path=str(shots / "web-chat-composer-375.png"))
            hint = await box.get_attribute("placeholder")
            assert hint
            # the hint, typed as text, wraps as the placeholder does: it must fit the box
            await box.fill(hint)
            fits = await box.evaluate("t => t.scrollHeight <= t.clientHeight")
            sizes = await box.evaluate("t => [t.scrollHeight, t.clientHeight]")
            await box.fill("")
            assert fits, f"the composer's hint is cut off (scroll, client height): {sizes}"
            assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        finally:
            await page.close()
