"""The operator pages show a session's lifecycle and links and filter on them (Debian's
chromium): the sessions list by status, topic, minimum priority and tags, each row with its
topic, priority and tags; a session's page with its topic, priority, tags and its links by
type, target and relation."""

from __future__ import annotations

from playwright.async_api import Browser, Page, expect

from gateway.core.domain import SessionKey
from session_store.repos.operator import OperatorStore
from tests.integration.http.test_browser import TIMEOUT_MS, _record_errors, browser  # noqa: F401
from testsupport.harness import running_gateway, wait_for

TOKEN = "filters-test-admin-token-0123456789abcdef"


async def _is_listed(page: Page, want: list[str]) -> bool:
    """Whether the sessions list shows exactly ``want`` (ids), read at one instant."""
    ids = await page.evaluate(
        "Array.from(document.querySelectorAll('#session-rows tr[data-session-id]'))"
        ".map((tr) => tr.dataset.sessionId)"
    )
    return sorted(ids) == want


async def test_ops_lists_filters_and_shows_lifecycle_and_links(
    database_url: str,
    browser: Browser,  # noqa: F811 - the imported fixture
) -> None:
    async with running_gateway(database_url, GATEWAY_ADMIN_TOKEN=TOKEN) as gw:
        ops = OperatorStore(gw.store)
        made = {}
        for chat, topic, priority, tags in (
            ("billing", "Invoice run", 5, ["billing", "urgent"]),
            ("billing-2", "Invoice follow-up", 1, ["billing"]),
            ("infra", "Disk alarms", 9, ["infra"]),
        ):
            key = SessionKey(platform="web", scope="local", chat_id=chat, thread_id=None)
            session, _ = await ops.create_session(key, participant="agent:test")
            await gw.store.sessions.set_attributes(
                session.id, topic=topic, priority=priority, tags=tags
            )
            made[chat] = session.id
        await gw.store.sessions.transition(made["infra"], "pause")
        await ops.add_link(
            made["billing"], link_type="issue", target_ref="TRACK-42", relation="input"
        )

        page = await browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        await page.add_init_script(f"sessionStorage.setItem('chat-gateway-admin-token', {TOKEN!r})")
        errors: list[str] = []
        _record_errors(page, errors)
        await page.goto(f"{gw.url}ops")
        row = page.locator(f'#session-rows tr[data-session-id="{made["billing"]}"]')
        await expect(row.locator("td.topic")).to_have_text("Invoice run")
        await expect(row.locator("td.priority")).to_have_text("5")
        await expect(row.locator("td.tags")).to_have_text("billing, urgent")

        async def filtered(expected: set[int]) -> None:
            await page.locator("#filters button:not([type])").click()
            want = sorted(str(i) for i in expected)
            await wait_for(lambda: _is_listed(page, want), timeout=TIMEOUT_MS / 1000)

        await page.fill("#f-tags", "billing")
        await filtered({made["billing"], made["billing-2"]})
        await page.fill("#f-tags", "billing, urgent")
        await filtered({made["billing"]})
        await page.fill("#f-tags", "")
        await page.fill("#f-topic", "invoice")
        await filtered({made["billing"], made["billing-2"]})
        await page.fill("#f-topic", "")
        await page.fill("#f-priority", "5")
        await filtered({made["billing"], made["infra"]})
        await page.fill("#f-priority", "")
        await page.select_option("#f-status", "paused")
        await filtered({made["infra"]})

        await page.goto(f"{gw.url}ops/sessions/{made['billing']}")
        lifecycle = page.locator("#session-lifecycle")
        await expect(lifecycle).to_contain_text("topic Invoice run")
        await expect(lifecycle).to_contain_text("priority 5")
        await expect(lifecycle).to_contain_text("tags billing, urgent")
        await expect(page.locator("#artifacts li.link")).to_have_text("input: issue TRACK-42")
        await page.goto(f"{gw.url}ops/sessions/{made['infra']}")
        await expect(page.locator("#session-title .badge")).to_have_text("paused")
        assert errors == []
