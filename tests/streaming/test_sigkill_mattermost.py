"""SIGKILL of the real ``gateway run`` process mid-stream on Mattermost: the half-written
post stays in the thread; the restarted process takes the turn over and patches that same
post into the one final answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import wait_for
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

SLOW = " ".join(f"slow{n}" for n in range(300))
FINAL = "Written again after the restart: " + " ".join(f"w{n}" for n in range(30))


async def test_sigkill_mid_stream_on_mattermost_ends_with_one_post(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    async with FakeMattermost() as mm:
        env = {
            "DATABASE_URL": database_url,
            "MATTERMOST_URL": mm.url,
            "MATTERMOST_TOKEN": str(mm.bot.token),
            "AGENT": "openai",
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "test-key",
            "AGENT_MODEL": "small",
            "GATEWAY_TOOLS": "false",
            "GATEWAY_LEASE_SECONDS": "2",
            "GATEWAY_POLL_SECONDS": "0.2",
            "GATEWAY_WEB_CHAT": "false",
            "GATEWAY_STREAM_EDIT_SECONDS": "0.2",
        }
        fake.script.append(Step(text=SLOW, chunk_chars=8, chunk_delay=0.2))
        root: dict[str, Any] = {}

        def in_thread() -> list[dict[str, Any]]:
            return mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)

        async with gateway_process(env, tmp_path / "one.log") as gw:
            await wait_for(lambda: mm.live_connections > 0, timeout=30)
            root.update(await mm.user_posts(mm.town_square, "a long question", mention_bot=True))
            await wait_for(lambda: bool(in_thread()) and bool(mm.edits), timeout=30)
            gw.kill()
            await gw.proc.wait()
        [orphan] = in_thread()
        assert SLOW.startswith(orphan["message"].rstrip()) and orphan["message"] != SLOW

        fake.script.append(Step(text=FINAL, chunk_chars=20, chunk_delay=0.05))
        async with gateway_process(env, tmp_path / "two.log") as gw:
            await wait_for(lambda: [p["message"] for p in in_thread()] == [FINAL], timeout=30)
            assert await gw.terminate() == 0
        [final] = in_thread()
        assert final["id"] == orphan["id"]
        bot_posts = [p for p in mm.posts.values() if p["user_id"] == mm.bot.id]
        assert len(bot_posts) == 1 and all(e[2] == root["id"] for e in mm.edits)
