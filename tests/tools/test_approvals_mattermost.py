"""Approvals on Mattermost (issue 14): the card is a post in the asker's thread; ✅ / ❌
reactions on it decide; someone else's reaction changes nothing; the card is edited to show
the decision."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters.mattermost.adapter import MattermostAdapter
from benchmarks.fakes.mattermost import FakeMattermost
from gateway.agent_clients import OpenAIAgent
from tests.agents.fake_openai import FakeOpenAI, Step
from tests.mattermost.conftest import connected, make_config
from tests.support import running_gateway, wait_for
from tests.tools.test_approvals_telegram import POLICY, RESTART, install


async def test_mattermost_reactions_decide_only_by_the_asker_and_the_card_is_edited(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(POLICY)
    runs: list[Mapping[str, Any]] = []
    fake.script.extend([Step(tool_calls=[RESTART]), Step(text="OK, I will not restart it.")])
    async with FakeMattermost() as mm:
        adapter = MattermostAdapter(make_config(mm))
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
            web_chat=False,
            AGENT_MODEL="small",
            GATEWAY_TOOLS_FILE=str(tools_file),
        ) as gw:
            install(gw, runs)
            await connected(adapter)
            root = await mm.user_posts(mm.town_square, "restart the api", mention_bot=True)

            def cards() -> list[dict[str, Any]]:
                return [
                    p
                    for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
                    if "React with" in p["message"]
                ]

            [card] = await wait_for(cards)
            assert card["root_id"] == root["id"]  # in the asker's thread
            await mm.react(card["id"], "white_check_mark", user="bob")  # not the asker
            await mm.react(card["id"], "+1", user="alice")  # feedback, not a decision
            await mm.react(card["id"], "x", user="alice")  # the asker denies
            await wait_for(
                lambda: any(
                    p["message"] == "OK, I will not restart it."
                    for p in mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)
                ),
                timeout=15,
            )
            await wait_for(lambda: mm.posts[card["id"]]["message"].startswith("❌ Denied"))
            async with gw.store.db.connection() as conn:
                row = await conn.fetchrow("SELECT status, decided_by, version FROM tool_approvals")
    assert runs == []
    assert row is not None and row["status"] == "denied" and row["version"] == 2
    assert row["decided_by"] == f"mattermost:{mm.alice.id}"
    denied = fake.turn_requests[-1].body["messages"][-1]
    assert denied["role"] == "tool" and denied["content"].startswith("not approved (denied)")
