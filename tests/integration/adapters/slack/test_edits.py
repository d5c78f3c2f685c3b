"""Edits and deletions on Slack, end to end (fake Slack -> the adapter's message_changed /
message_deleted -> the real core -> chat.update / chat.delete on the fake): after the
answer, an edited question's answer is edited in place (``on_edit = "update"``), a deleted
question's answer is deleted (``on_delete = "retract"``); a redelivered edit counts once."""

from __future__ import annotations

from adapters.slack import SlackAdapter
from testsupport.fakes.slack import FakeSlack
from testsupport.harness import running_gateway, wait_for
from testsupport.slack import slack_settings


async def test_an_edit_rewrites_the_answer_and_a_deletion_retracts_it(
    database_url: str, fake: FakeSlack
) -> None:
    async with running_gateway(
        database_url,
        adapters=[SlackAdapter(slack_settings(fake))],
        web_chat=False,
        GATEWAY_ON_DELETE="retract",
    ) as gw:
        fake.events_url = f"{gw.url}slack/events"
        asked = await fake.user_posts("D0DM", "wat time is it")
        (reply,) = await wait_for(lambda: fake.bot_posts(), message="the reply")
        edit = await fake.user_edits("D0DM", asked.ts, "what time is it")
        await wait_for(lambda: fake.updates, message="the answer edited")
        # Slack retries the same event (same event_id): it counts once
        await fake.resend(edit[0])
        assert edit[0].succeeded and len(edit[0].attempts) == 2
        await fake.user_deletes("D0DM", asked.ts)
        await wait_for(lambda: fake.deleted, message="the answer deleted")
        calls = len(fake.calls_to("chat.update"))
    assert [(u[1], u[3]) for u in fake.updates] == [(reply.ts, "echo: what time is it")]
    assert calls == 1
    assert fake.deleted == [("D0DM", reply.ts)]
    assert fake.bot_posts() == []
