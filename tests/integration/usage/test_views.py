"""The usage figures as operators see them: ``GET /api/v1/usage``, ``/ops/usage``,
``gateway usage`` and ``gateway people``."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
import pytest

from gateway.people.cli import run as run_people
from gateway.runtime.gateway import Gateway
from gateway.usage.cli import run as run_usage
from testsupport.harness import make_settings, running_gateway

BUDGETS = """
[prices."small"]
input = 1.0
output = 2.0
[budgets]
total_per_month = 10.0
[budgets.places."sink:*:c"]
per_month = 1.0
"""


async def _seed(gw: Gateway) -> None:
    async with gw.store.db.connection() as conn:
        await conn.execute(
            "INSERT INTO usage_ledger (account, person_id, place, model, kind, prompt_tokens, "
            "completion_tokens, cost) VALUES "
            "('sink:test:ann', person_of('sink:test:ann'), 'sink:test:c', 'small', 'answer', "
            " 1000, 200, 0.0014), "
            "('web:local:bob', person_of('web:local:bob'), 'web:local:general', 'big', "
            " 'answer', 500, 100, NULL)"
        )


async def test_api_page_and_cli_show_the_ledger_and_the_budgets(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(BUDGETS)
    async with (
        running_gateway(database_url, web_chat=False, GATEWAY_CONFIG_FILE=str(path)) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        await _seed(gw)
        by_model = (await client.get("/api/v1/usage", params={"by": "model"})).json()
        bad = await client.get("/api/v1/usage", params={"by": "colour"})
        bad_day = await client.get("/api/v1/usage", params={"since": "yesterday"})
        page = await client.get("/ops/usage")
        script = await client.get("/ops/usage/usage.js")
    assert [(r["key"], r["tokens"], r["cost"]) for r in by_model["rows"]] == [
        ("small", 1200, 0.0014),
        ("big", 600, None),
    ]
    budgets = {b["limit"]: b for b in by_model["budgets"]}
    assert budgets['places."sink:*:c"']["left_cost"] == pytest.approx(1.0 - 0.0014)
    assert budgets["total_per_month"]["spent_tokens"] == 1800
    assert bad.status_code == 422 and bad_day.status_code == 422
    assert page.status_code == 200 and "Spend per day" in page.text
    assert script.status_code == 200 and "createElementNS" in script.text

    settings = make_settings(database_url, GATEWAY_CONFIG_FILE=str(path))
    args = argparse.Namespace(by="person", since=None, until=None, json=False)
    assert await run_usage(settings, args) == 0
    out = capsys.readouterr().out
    assert "sink:test:ann" in out and "0.0014" in out and "total_per_month" in out

    link = argparse.Namespace(people_command="link", first="sink:test:ann", second="web:local:bob")
    # link checks each account's platform is served (gateway.ops.cli passes the installed ones)
    assert await run_people(settings, link, platforms=("sink", "web")) == 0
    assert await run_people(settings, argparse.Namespace(people_command="list")) == 0
    listed = capsys.readouterr().out
    assert "sink:test:ann, web:local:bob" in listed
    args = argparse.Namespace(by="person", since=None, until=None, json=True)
    assert await run_usage(settings, args) == 0
    assert '"calls": 2' in capsys.readouterr().out  # one person now, both rows
