"""Slack's own streaming (chat.startStream / appendStream / stopStream, through slack_sdk's
``chat_stream`` helper): the answer grows in the asker's exact thread and ends as exactly one
message, edited once into the stored reply with its feedback buttons. Where Slack refuses the
methods the answer streams by edits (``test_slack_mattermost.py``)."""

from __future__ import annotations

from typing import Any

from adapters.slack import SlackAdapter
from gateway.agents.openai import OpenAIAgent
from tests.integration.outbox.test_slack_mattermost import SLACK_FINAL
from tests.integration.outbox.test_telegram import answer_step
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.slack import HUMAN, FakeSlack
from testsupport.harness import running_gateway, wait_for
from testsupport.slack import slack_settings


def agent(fake: FakeOpenAI) -> OpenAIAgent:
    return OpenAIAgent(base_url=fake.base_url, api_key="k", model="small")


async def test_a_channel_answer_streams_natively_and_ends_as_one_message_in_the_thread(
    database_url: str, fake: FakeOpenAI
) -> None:
    fake.script.extend([answer_step(), answer_step()])
    async with FakeSlack() as slack:
        slack.add_channel("C0GEN", members=(HUMAN,))
        slack.add_channel("D0DM", kind="im", members=(HUMAN,))
        async with running_gateway(
            database_url,
            adapters=[SlackAdapter(slack_settings(slack))],
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
            assert first[0].streaming and first[0].text != SLACK_FINAL  # seen while written
            await wait_for(lambda: [m.text for m in in_thread()] == [SLACK_FINAL], timeout=20)
            # an assistant thread (in the app's DM) streams too

            dm_root, _ = await slack.user_opens_assistant_thread("D0DM")
            await slack.user_posts("D0DM", "tell me a lot", thread_ts=dm_root)

            def in_dm_thread() -> list[Any]:
                return [m for m in slack.bot_posts("D0DM") if m.thread_ts == dm_root]

            await wait_for(lambda: [m.text for m in in_dm_thread()] == [SLACK_FINAL], timeout=20)
        [final] = in_thread()
        assert not final.streaming
        assert final.blocks is not None and final.blocks[-1]["type"] == "context_actions"
        # never posted, never sent again: started, grown, stopped, edited once into the reply
        assert slack.calls_to("chat.postMessage") == []
        methods = [c[0] for c in slack.stream_calls if c[2] == final.ts]
        assert methods[0] == "chat.startStream" and methods[-1] == "chat.stopStream"
        assert "chat.appendStream" in methods
        start = slack.calls_to("chat.startStream")[0].params
        assert (start["channel"], start["thread_ts"]) == ("C0GEN", root.ts)
        assert (start["recipient_team_id"], start["recipient_user_id"]) == (slack.team_id, HUMAN)
        # the stream showed the answer as it grew: what it appended is the answer's start
        streamed = "".join(c[3] for c in slack.stream_calls if c[2] == final.ts)
        assert len(streamed) > 20 and SLACK_FINAL.startswith(streamed[:20])
        assert [u[3] for u in slack.updates if u[1] == final.ts] == [SLACK_FINAL]
        assert len(in_dm_thread()) == 1
        dm_start = slack.calls_to("chat.startStream")[1].params
        assert "recipient_user_id" in dm_start  # the asker is known in a DM too
        assert slack.thread_violations == []
