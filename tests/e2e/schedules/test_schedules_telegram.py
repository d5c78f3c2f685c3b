"""A one-shot schedule into a Telegram forum topic, made with ``gateway schedule add``, lands
once, in the topic; another one removed (through the admin API) before its time never fires;
an MCP first post into a topic nobody wrote in lands in that topic. Against a real
``gateway run`` and the fake Bot API."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from mcp import Client

from testsupport.fakes.telegram import FakeTelegram
from testsupport.process import gateway_process, run_cli

pytestmark = pytest.mark.slow


async def test_a_one_shot_lands_once_in_its_topic_and_a_removed_one_never_fires(
    database_url: str, fake: FakeTelegram, tmp_path: Path
) -> None:
    forum = fake.forum()
    topic, other, quiet = (fake.create_topic(forum, n) for n in ("Ops", "Other", "Quiet"))
    env = {
        "DATABASE_URL": database_url,
        "TELEGRAM_BOT_TOKEN": fake.token,
        "TELEGRAM_API_BASE_URL": fake.base_url,
        "GATEWAY_POLL_SECONDS": "0.2",
        "GATEWAY_WEB_CHAT": "false",
        "GATEWAY_STREAMING": "false",
    }
    place = f"telegram:bot:{forum.id}:{topic}"
    async with gateway_process(env, tmp_path / "gw.log") as gw:
        # made by the CLI beside the running gateway, whose scheduler polls the database; far
        # enough ahead that the second one is removed before it falls due
        soon = (datetime.now(UTC) + timedelta(seconds=10)).strftime("%Y-%m-%d %H:%M:%S")
        code, out, err = await run_cli(
            ["schedule", "add", place, "--at", soon, "--prompt", "reminder: standup"], env
        )
        assert code == 0, err
        code, out, _ = await run_cli(["schedule", "list", "--json"], env)
        assert [(s["place"], s["status"]) for s in json.loads(out)] == [(place, "active")]
        async with httpx.AsyncClient() as http:
            other_place = f"telegram:bot:{forum.id}:{other}"
            extra = await http.post(
                f"{gw.url}/api/v1/schedules",
                json={"place": other_place, "prompt": "no", "at": soon},
            )
            assert extra.status_code == 201, extra.text
            removed = await http.delete(f"{gw.url}/api/v1/schedules/{extra.json()['id']}")
            assert removed.status_code == 204
        async with Client(f"{gw.url}/mcp") as client:
            made = await client.call_tool(
                "create_session",
                {
                    "platform": "telegram",
                    "scope": "bot",
                    "chat": str(forum.id),
                    "thread": str(quiet),
                    "participant": "planner",
                },
            )
            assert not made.is_error and made.structured_content is not None
            posted = await client.call_tool(
                "append_session_message",
                {
                    "session": made.structured_content["session_id"],
                    "participant": "planner",
                    "content": "First post in a quiet topic.",
                    "deliver": True,
                },
            )
            assert not posted.is_error, posted.content
        await fake.wait_until(
            lambda: bool(fake.sent_to(forum, quiet)), within=30, what="the first post"
        )
        await fake.wait_until(
            lambda: bool(fake.sent_to(forum, topic)), within=60, what="the one-shot's answer"
        )
        assert await gw.terminate() == 0
    assert [s.text for s in fake.sent_to(forum, topic)] == ["echo: reminder: standup"]
    assert [s.text for s in fake.sent_to(forum, quiet)] == ["First post in a quiet topic."]
    assert fake.sent_to(forum, other) == [] and fake.sent_to(forum, None) == []
    assert len(fake.sent) == 2
