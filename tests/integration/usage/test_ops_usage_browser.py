"""The ``/ops/usage`` page in a real browser: the chart of spend per day, top people, places
and models, and the budgets, drawn from the API without a script error."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import Browser, expect

from gateway.runtime.gateway import Gateway
from tests.integration.http.test_browser import _record_errors, browser  # noqa: F401 (the fixture)
from testsupport.harness import running_gateway

CONFIG = """
[prices."gpt-4o-mini"]
input = 0.15
output = 0.60
[budgets]
person_per_day = 1.00
total_per_month = 50.00
[budgets.places."slack:*:C0SUPPORT"]
per_month = 10.00
"""

#: (days ago, account, place, model, prompt, completion, cost)
ROWS = [
    (n % 6, account, place, model, 40_000 + 7_000 * n, 9_000 + 1_500 * n, 0.02 + 0.035 * n)
    for n, (account, place, model) in enumerate(
        [
            ("telegram:bot:1001", "telegram:bot:-100777", "gpt-4o-mini"),
            ("slack:T01:U02", "slack:T01:C0SUPPORT", "gpt-4o-mini"),
            ("web:local:ann", "web:local:general", "gpt-4o"),
            ("slack:T01:U03", "slack:T01:C0SUPPORT", "gpt-4o-mini"),
            ("telegram:bot:1001", "telegram:bot:-100777", "gpt-4o"),
            ("web:local:bob", "web:local:general", "gpt-4o-mini"),
            ("slack:T01:U02", "slack:T01:C0SUPPORT", "gpt-4o"),
            ("web:local:ann", "web:local:general", "gpt-4o-mini"),
        ]
    )
]


async def seed(gw: Gateway) -> None:
    async with gw.store.db.connection() as conn:
        for days, account, place, model, prompt, completion, cost in ROWS:
            await conn.execute(
                "INSERT INTO usage_ledger (at, account, person_id, place, model, kind, "
                "prompt_tokens, completion_tokens, cost, price_version) "
                "VALUES (now() - make_interval(days => $1), $2, person_of($2), $3, $4, "
                "'answer', $5, $6, $7::numeric, 1)",
                days,
                account,
                place,
                model,
                prompt,
                completion,
                f"{cost:.4f}",
            )
    await gw.store.people.link("telegram:bot:1001", "web:local:ann")


async def test_the_usage_page_draws_spend_per_day_and_the_tables(
    database_url: str,
    browser: Browser,  # noqa: F811
    tmp_path: Path,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    async with running_gateway(database_url, web_chat=False, GATEWAY_CONFIG_FILE=str(config)) as gw:
        await seed(gw)
        page = await browser.new_page(viewport={"width": 1100, "height": 1000})
        errors: list[str] = []
        _record_errors(page, errors)
        await page.goto(gw.url.rstrip("/") + "/ops/usage")
        await expect(page.locator("#chart svg rect").first).to_be_visible()
        await expect(page.locator("#person-rows tr").first).to_be_visible()
        await expect(page.locator("#budget-rows")).to_contain_text("total_per_month")
        await expect(page.locator("#model-rows")).to_contain_text("gpt-4o-mini")
        await expect(page.locator("#person-rows")).to_contain_text("web:local:ann")
        bars = await page.locator("#chart svg rect").count()
        # kept with the test's files (pytest --basetemp) for the documentation
        await page.screenshot(path=str(tmp_path / "ops_usage.png"), full_page=True)
        await page.close()
    assert errors == []
    assert bars >= 1
