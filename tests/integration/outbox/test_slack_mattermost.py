"""Streaming by edits on Slack (chat.postMessage + chat.update, where Slack refuses its own
streaming methods) and Mattermost (post patches): the preview grows in the asker's exact
thread and ends as exactly one message there."""

from __future__ import annotations

from typing import Any

import structlog

from adapters.mattermost.adapter import MattermostAdapter
from adapters.slack import SlackAdapter
from gateway.agents.openai import OpenAIAgent
from tests.integration.outbox.test_telegram import ANSWER, answer_step
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.slack import HUMAN, FakeSlack
from testsupport.harness import running_gateway, wait_for
from testsupport.mattermost import connected, make_config
from testsupport.slack import slack_settings

SLACK_FINAL = ANSWER.replace("**", "*")  # mrkdwn bold


def agent(fake: FakeOpenAI) -> OpenAIAgent:
    return OpenAIAgent(base_url=fake.base_url, api_key="k", model="small")


async def test_slack_refusing_its_streaming_falls_back_to_edits_and_ends_as_one_message(
    database_url: str, fake: FakeOpenAI
) -> None:
    fake.script.append(answer_step())
    async with FakeSlack() as slack:
        slack.add_channel("C0GEN", members=(HUMAN,))
        slack.refuse_streaming = "unknown_method"  # a workspace without chat.startStream
        adapter = SlackAdapter(slack_settings(slack))
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=agent(fake),
            web_chat=False,
            AGENT_MODEL="small",
            GATEWAY_TOOLS=False,
            GATEWAY_STREAM_EDIT_SECONDS=0.2,
        ) as gw:
            slack.events_url = f"{gw.url}slack/events"
            root = await slack.user_posts("C0GEN", f"<@{slack.bot_user_id}> tell me a lot")

            def in_thread() -> list[Any]:
                return [m for m in slack.bot_posts("C0GEN") if m.thread_ts == root.ts]

            first = await wait_for(in_thread, timeout=15)
            assert first[0].text != SLACK_FINAL  # visible before the model finished
            await wait_for(lambda: [m.text for m in in_thread()] == [SLACK_FINAL], timeout=20)
        [final] = in_thread()
        updates = [u for u in slack.updates if u[1] == final.ts]
        assert len(updates) >= 2 and updates[-1][3] == SLACK_FINAL
        assert all(u[2] == root.ts for u in updates)  # every edit in the asker's thread
        assert len(slack.calls_to("chat.postMessage")) == 1  # the preview; never sent again
        assert [m.thread_ts for m in slack.bot_posts("C0GEN")] == [root.ts]
        # tried once, refused, then remembered: no second try for the rest of the answer
        assert len(slack.calls_to("chat.startStream")) == 1
        assert slack.stream_calls == []


async def test_mattermost_post_is_patched_in_the_thread_and_ends_as_one_post(
    database_url: str, fake: FakeOpenAI
) -> None:
    fake.script.append(answer_step())
    async with FakeMattermost() as mm:
        adapter = MattermostAdapter(make_config(mm))
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=agent(fake),
            web_chat=False,
            AGENT_MODEL="small",
            GATEWAY_TOOLS=False,
            GATEWAY_STREAM_EDIT_SECONDS=0.2,
        ):
            await connected(adapter)
            root = await mm.user_posts(mm.town_square, "tell me a lot", mention_bot=True)

            def in_thread() -> list[dict[str, Any]]:
                return mm.posts_in(mm.town_square, root_id=root["id"], by=mm.bot)

            first = await wait_for(in_thread, timeout=15)
            assert first[0]["message"] != ANSWER
            await wait_for(lambda: [p["message"] for p in in_thread()] == [ANSWER], timeout=20)
        [final] = in_thread()
        edits = [e for e in mm.edits if e[0] == final["id"]]
        assert len(edits) >= 2 and edits[-1][3] == ANSWER
        assert all(e[2] == root["id"] for e in edits)
        bot_posts = [p for p in mm.posts.values() if p["user_id"] == mm.bot.id]
        assert len(bot_posts) == 1


async def test_429_on_slack_and_mattermost_edits_slows_the_preview_and_the_answer_lands_once(
    database_url: str, fake: FakeOpenAI
) -> None:
    fake.script.extend([answer_step(), answer_step()])
    async with FakeSlack() as slack, FakeMattermost() as mm:
        slack.add_channel("C0GEN", members=(HUMAN,))
        slack.refuse_streaming = "unknown_method"  # previews by edits
        slack.fail_next("chat.update", status=429, retry_after=1, times=2)
        mm.rate_limit_next("patch_post", retry_after=1, count=2)
        mm_adapter = MattermostAdapter(make_config(mm))
        with structlog.testing.capture_logs() as logs:
            async with running_gateway(
                database_url,
                adapters=[SlackAdapter(slack_settings(slack)), mm_adapter],
                agent=agent(fake),
                web_chat=False,
                AGENT_MODEL="small",
                GATEWAY_TOOLS=False,
                GATEWAY_STREAM_EDIT_SECONDS=0.2,
            ) as gw:
                slack.events_url = f"{gw.url}slack/events"
                await connected(mm_adapter)
                root = await slack.user_posts("C0GEN", f"<@{slack.bot_user_id}> tell me a lot")
                mm_root = await mm.user_posts(mm.town_square, "tell me a lot", mention_bot=True)
                await wait_for(
                    lambda: [m.text for m in slack.bot_posts("C0GEN")] == [SLACK_FINAL],
                    timeout=30,
                )
                await wait_for(
                    lambda: (
                        [
                            p["message"]
                            for p in mm.posts_in(mm.town_square, root_id=mm_root["id"], by=mm.bot)
                        ]
                        == [ANSWER]
                    ),
                    timeout=30,
                )
    throttled = [e for e in logs if e["event"] == "stream_preview_throttled"]
    assert {e.get("platform") for e in throttled} == {"slack", "mattermost"}
    assert all(e["retry_after"] == 1 for e in throttled)
    assert [m.thread_ts for m in slack.bot_posts("C0GEN")] == [root.ts]
    assert len(slack.calls_to("chat.postMessage")) == 1
    assert len([p for p in mm.posts.values() if p["user_id"] == mm.bot.id]) == 1
