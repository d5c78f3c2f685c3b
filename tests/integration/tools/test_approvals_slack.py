"""Approvals on Slack: the card has buttons in the asker's thread; presses come to
POST /slack/interactions (signature verified) or over Socket Mode; someone else gets an
ephemeral refusal; the card is updated without its buttons. A double press, a press from
another thread and a restart while the request waits: tests/contract/test_approvals.py."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from adapters.slack import SlackAdapter
from adapters.slack.transport import APPROVE_ACTION, DENY_ACTION
from tests.integration.tools.test_approvals_telegram import RESTART, approvals_gateway, install
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.slack import HUMAN, FakeSlack
from testsupport.harness import wait_for
from testsupport.slack import slack_settings


async def test_slack_buttons_through_interactions_only_the_asker_decides_once(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    runs: list[Mapping[str, Any]] = []
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [Step(tool_calls=[RESTART]), Step(tool_calls=[RESTART]), Step(text="Restarted.")]
    )
    async with FakeSlack() as slack:
        slack.add_channel("C0OPS", members=(HUMAN, "U0OTHER"))
        adapter = SlackAdapter(slack_settings(slack))
        async with approvals_gateway(
            database_url,
            fake,
            tmp_path,
            adapter,
        ) as gw:
            install(gw, runs)
            slack.events_url = f"{gw.url}slack/events"
            url = f"{gw.url}slack/interactions"
            root = await slack.user_posts("C0OPS", f"<@{slack.bot_user_id}> restart the api")

            def card() -> Any:
                return next((m for m in slack.bot_posts("C0OPS") if m.blocks), None)

            posted = await wait_for(card)
            assert posted.thread_ts == root.ts  # in the asker's thread
            assert (await slack.click_button(url, posted, APPROVE_ACTION, signed=False))[0] == 401
            status, _ = await slack.click_button(url, posted, APPROVE_ACTION, user="U0OTHER")
            assert status == 200 and runs == []
            first = await slack.click_button(url, posted, APPROVE_ACTION)
            assert first[0] == 200
            await wait_for(
                lambda: any(m.text == "Restarted." for m in slack.bot_posts("C0OPS")), timeout=15
            )
            await wait_for(lambda: posted.edited)
    assert runs == [{"service": "api"}]
    # the refusal is shown to the presser only, in the asker's thread (a double press and a
    # press from another thread: tests/contract/test_approvals.py)
    [refusal] = slack.ephemerals
    assert refusal["user"] == "U0OTHER" and "only the person who asked" in refusal["text"]
    assert refusal["thread_ts"] == root.ts
    assert posted.text.startswith(f"✅ Approved by slack:{HUMAN}")
    assert not any(b.get("type") == "actions" for b in posted.blocks or [])


async def test_slack_socket_mode_interactive_envelope_decides_and_is_acked(
    database_url: str, fake: FakeOpenAI, tmp_path: Path
) -> None:
    runs: list[Mapping[str, Any]] = []
    # the turn parks on the request; after the decision it runs again and the model
    # asks for the same call, which finds the decided request
    fake.script.extend(
        [
            Step(tool_calls=[RESTART]),
            Step(tool_calls=[RESTART]),
            Step(text="Denied, so nothing ran."),
        ]
    )
    async with FakeSlack() as slack:
        slack.add_channel("C0OPS")
        slack.mode = "socket"
        adapter = SlackAdapter(
            slack_settings(slack, SLACK_APP_TOKEN=slack.app_token, SLACK_SIGNING_SECRET=None)
        )
        async with approvals_gateway(
            database_url,
            fake,
            tmp_path,
            adapter,
        ) as gw:
            install(gw, runs)
            await slack.user_posts("C0OPS", f"<@{slack.bot_user_id}> restart the api")
            found = await wait_for(
                lambda: next((m for m in slack.bot_posts("C0OPS") if m.blocks), None)
            )
            assert found is not None
            posted = found
            delivery = await slack.click_button_socket(posted, DENY_ACTION)
            await wait_for(
                lambda: any(m.text == "Denied, so nothing ran." for m in slack.bot_posts("C0OPS")),
                timeout=15,
            )
            await wait_for(lambda: posted.edited)
    assert delivery.succeeded and runs == []
    assert posted.text.startswith(f"❌ Denied by slack:{HUMAN}")
