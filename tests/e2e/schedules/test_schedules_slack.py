"""``/schedule`` in a Slack thread against a real ``gateway run`` and the fake Slack: the
schedule is made in the thread, fires there several times (a seconds-level cron), is listed
and cancelled there. Then MCP first posts: a channel nobody wrote in gets a root post, and a
channel the bot is not in ends as a visible failed delivery with Slack's reason."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from mcp import Client

from testsupport.fakes.slack import BOT_TOKEN, SIGNING_SECRET, TEAM_ID, FakeSlack, wait_until
from testsupport.process import gateway_process

pytestmark = pytest.mark.slow

CHANNEL = "C0GENERAL"


def _in_thread(slack: FakeSlack, root: str) -> list[str]:
    return [m.text for m in slack.bot_posts(CHANNEL) if m.thread_ts == root]


async def _call(client: Client, tool: str, **arguments: object) -> dict[str, object]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}: {result.content}"
    assert result.structured_content is not None
    return dict(result.structured_content)


async def test_schedule_in_a_slack_thread_fires_there_and_mcp_posts_first(
    database_url: str, tmp_path: Path
) -> None:
    async with FakeSlack() as slack:
        slack.add_channel(CHANNEL)
        slack.add_channel("C0FRESH")
        slack.add_channel("C0NOBOT", bot_member=False)
        env = {
            "DATABASE_URL": database_url,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
            "GATEWAY_POLL_SECONDS": "0.2",
            "GATEWAY_WEB_CHAT": "false",
            "GATEWAY_STREAMING": "false",
        }
        async with gateway_process(env, tmp_path / "gw.log") as gw:
            slack.events_url = f"{gw.url}/slack/events"
            bot = f"<@{slack.bot_user_id}>"
            root = (await slack.user_posts(CHANNEL, f"{bot} hello")).ts
            await wait_until(lambda: len(_in_thread(slack, root)) == 1, within=30, what="hi")

            ask = f'{bot} /schedule cron "* * * * * */2" status of the build?'
            await slack.user_posts(CHANNEL, ask, thread_ts=root)
            await wait_until(lambda: len(_in_thread(slack, root)) >= 2, within=30, what="made")
            made = _in_thread(slack, root)[1]
            assert made.startswith("Scheduled #1 cron"), made
            firing = "echo: status of the build?"
            await wait_until(
                lambda: _in_thread(slack, root).count(firing) >= 3, within=40, what="3 firings"
            )
            await slack.user_posts(CHANNEL, f"{bot} /schedule list", thread_ts=root)
            await wait_until(
                lambda: any(t.startswith("Schedules here:") for t in _in_thread(slack, root)),
                within=30,
                what="the list",
            )
            await slack.user_posts(CHANNEL, f"{bot} /schedule cancel 1", thread_ts=root)
            await wait_until(
                lambda: "Cancelled schedule #1." in _in_thread(slack, root),
                within=30,
                what="cancelled",
            )
            fired = _in_thread(slack, root).count(firing)
            # every bot post of this conversation is in the thread: none at the channel root
            assert [m.text for m in slack.bot_posts(CHANNEL) if m.thread_ts is None] == []

            async with Client(f"{gw.url}/mcp") as client:
                fresh = await _call(
                    client,
                    "create_session",
                    platform="slack",
                    scope=TEAM_ID,
                    chat="C0FRESH",
                    participant="digest-agent",
                )
                sent = await _call(
                    client,
                    "append_session_message",
                    session=fresh["session_id"],
                    participant="digest-agent",
                    content="Good morning: the weekly digest.",
                    deliver=True,
                )
                assert sent["delivery"]
                await wait_until(
                    lambda: bool(slack.bot_posts("C0FRESH")), within=30, what="1st post"
                )
                nobot = await _call(
                    client,
                    "create_session",
                    platform="slack",
                    scope=TEAM_ID,
                    chat="C0NOBOT",
                    participant="digest-agent",
                )
                await _call(
                    client,
                    "append_session_message",
                    session=nobot["session_id"],
                    participant="digest-agent",
                    content="Nobody will see this.",
                    deliver=True,
                )

                async def failed() -> list[object]:
                    delta = await _call(client, "get_session_delta", session=nobot["session_id"])
                    messages = delta["messages"]
                    assert isinstance(messages, list)
                    return [d for m in messages for d in m.get("delivery", [])]

                deliveries: list[object] = []
                for _ in range(150):
                    deliveries = await failed()
                    if deliveries and all(
                        isinstance(d, dict) and d["status"] == "failed" for d in deliveries
                    ):
                        break
                    await asyncio.sleep(0.2)
                # visible, with Slack's own reason
                assert len(deliveries) == 1 and "not_in_channel" in str(deliveries)
            assert await gw.terminate() == 0
        # the schedule was made in the thread, fired in it, and nowhere else, and stopped
        assert _in_thread(slack, root).count(firing) == fired
        [root_post] = slack.bot_posts("C0FRESH")
        assert root_post.thread_ts is None and root_post.text == "Good morning: the weekly digest."
        assert slack.bot_posts("C0NOBOT") == []
        print("\n".join(f"bot (thread): {t}" for t in _in_thread(slack, root)))
        assert re.search(r"next \d{4}-\d{2}-\d{2}", made)
