"""SIGKILL of the real ``gateway run`` process mid-stream on Slack (Events API): the
half-written message stays in the thread; the restarted process takes the turn over and
updates that same message into the one final answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.slack import BOT_TOKEN, HUMAN, SIGNING_SECRET, FakeSlack
from testsupport.harness import wait_for
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

SLOW = " ".join(f"slow{n}" for n in range(300))
FINAL = "Written again after the restart: " + " ".join(f"w{n}" for n in range(30))


async def test_sigkill_mid_stream_on_slack_ends_with_one_message(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    async with FakeSlack() as slack:
        slack.add_channel("C0GEN", members=(HUMAN,))
        env = {
            "DATABASE_URL": database_url,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
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

        def in_thread() -> list[Any]:
            return [m for m in slack.bot_posts("C0GEN") if m.thread_ts == root["ts"]]

        async with gateway_process(env, tmp_path / "one.log") as gw:
            slack.events_url = f"{gw.url.rstrip('/')}/slack/events"
            posted = await slack.user_posts("C0GEN", f"<@{slack.bot_user_id}> a long question")
            root["ts"] = posted.ts
            await wait_for(lambda: bool(in_thread()) and bool(slack.updates), timeout=30)
            gw.kill()
            await gw.proc.wait()
        [orphan] = in_thread()
        assert SLOW.startswith(orphan.text.rstrip()) and orphan.text != SLOW

        fake.script.append(Step(text=FINAL, chunk_chars=20, chunk_delay=0.05))
        async with gateway_process(env, tmp_path / "two.log") as gw:
            slack.events_url = f"{gw.url.rstrip('/')}/slack/events"
            await wait_for(lambda: [m.text for m in in_thread()] == [FINAL], timeout=30)
            assert await gw.terminate() == 0
        [final] = in_thread()
        assert final.ts == orphan.ts
        assert [m.ts for m in slack.bot_posts("C0GEN")] == [orphan.ts]
        assert len(slack.calls_to("chat.postMessage")) == 1
        assert all(u[2] == root["ts"] for u in slack.updates)
