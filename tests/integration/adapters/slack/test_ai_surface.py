"""Slack's assistant threads and feedback buttons, fake Slack -> the real core -> fake Slack:
a thread opens with its place's suggested prompts and is titled from its first question; a
press of an answer's feedback buttons lands in the feedback table the web chat's thumbs fill,
as the presser's own, and only for one of our answers in that channel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.slack import SlackAdapter
from gateway.core.domain import SessionKey
from testsupport.fakes.slack import HUMAN, FakeSlack
from testsupport.harness import running_gateway, wait_for
from testsupport.slack import slack_settings

PROMPTS = ["What changed in the last release?", "Open a ticket"]


async def test_an_assistant_thread_opens_with_the_places_prompts_and_is_titled(
    database_url: str, fake: FakeSlack, tmp_path: Path
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"[profiles.support]\nsuggested_prompts = {PROMPTS!r}\n".replace("'", '"') + "\n[places]\n"
        '"slack:*:D0DM" = "support"\n'
    )
    fake.channels["D0DM"].members.add(HUMAN)
    fake.add_channel("D0OTHER", kind="im", members=(HUMAN,))
    async with running_gateway(
        database_url,
        adapters=[SlackAdapter(slack_settings(fake))],
        web_chat=False,
        GATEWAY_CONFIG_FILE=str(config),
    ) as gw:
        fake.events_url = f"{gw.url}slack/events"
        root, opened = await fake.user_opens_assistant_thread("D0DM")
        assert opened.succeeded
        # acked after the prompts were offered: nothing to wait for
        [(channel, thread, prompts, _)] = fake.suggested_prompts
        assert (channel, thread) == ("D0DM", root)
        assert [p["message"] for p in prompts] == PROMPTS
        assert [p["title"] for p in prompts] == PROMPTS
        # a retried delivery offers them once
        await fake.resend(opened)
        assert len(fake.suggested_prompts) == 1
        # a place whose profile has none offers none
        await fake.user_opens_assistant_thread("D0OTHER")
        assert len(fake.suggested_prompts) == 1

        await fake.user_posts("D0DM", "How do I reset my password?\nI tried twice.", thread_ts=root)
        await wait_for(
            lambda: [m for m in fake.bot_posts("D0DM") if m.thread_ts == root],
            message="the answer",
        )
        assert fake.titles == [("D0DM", root, "How do I reset my password?")]
        # a later question keeps the title
        await fake.user_posts("D0DM", "And my e-mail?", thread_ts=root)
        await wait_for(
            lambda: len([m for m in fake.bot_posts("D0DM") if m.thread_ts == root]) == 2,
            message="the second answer",
        )
        assert len(fake.titles) == 1
        assert fake.statuses == []  # the echo agent answers at once: no status was needed


async def test_a_feedback_press_is_the_pressers_feedback_on_that_answer(
    database_url: str, fake: FakeSlack
) -> None:
    fake.add_channel("C0OTHER")
    async with running_gateway(
        database_url, adapters=[SlackAdapter(slack_settings(fake))], web_chat=False
    ) as gw:
        fake.events_url = f"{gw.url}slack/events"
        interactions = f"{gw.url}slack/interactions"
        posted = await fake.user_posts("C0GENERAL", "<@U0BOT> rate me")
        (reply,) = await wait_for(lambda: fake.bot_posts("C0GENERAL"), message="the reply")
        assert reply.blocks is not None
        assert reply.blocks[0] == {
            "type": "section",
            "text": {"type": "mrkdwn", "text": reply.text},
        }
        assert reply.blocks[-1]["elements"][0]["type"] == "feedback_buttons"
        key = SessionKey(
            platform="slack", scope=fake.team_id, chat_id="C0GENERAL", thread_id=posted.ts
        )

        async def sent() -> bool:
            # a press matches the answer by its ts, stored just after the post returned
            return (await gw.store.outbox.delivery_counts()).get("sent", 0) == 1

        await wait_for(sent, message="the receipt")

        async def votes() -> list[tuple[str, int]]:
            async with gw.store.db.connection() as conn:
                rows = await conn.fetch(
                    "SELECT user_id, value FROM message_feedback ORDER BY user_id"
                )
            return [(r["user_id"], r["value"]) for r in rows]

        async def shown() -> int | None:
            session = await gw.store.sessions.find_session(key)
            assert session is not None
            return (await gw.store.sessions.feedback_by_seq(session.id)).get(2)

        status, _ = await fake.click_feedback(interactions, reply, positive=True)
        assert status == 200
        assert await votes() == [(HUMAN, 1)]
        assert await shown() == 1  # what the web chat shows for the answer
        # someone else's press is theirs: it neither changes nor replaces the asker's
        await fake.click_feedback(interactions, reply, positive=False, user="U0SECOND")
        assert await votes() == [(HUMAN, 1), ("U0SECOND", -1)]
        # the asker changes their mind: one row each, the latest press
        await fake.click_feedback(interactions, reply, positive=False)
        assert await votes() == [(HUMAN, -1), ("U0SECOND", -1)]
        # a press that names another channel is not one of our answers there: refused,
        # told to the presser only
        status, _ = await fake.click_feedback(
            interactions, reply, positive=True, user="U0THIRD", channel="C0OTHER"
        )
        assert status == 200
        assert await votes() == [(HUMAN, -1), ("U0SECOND", -1)]
        [notice] = fake.ephemerals
        assert notice["user"] == "U0THIRD" and notice["channel"] == "C0OTHER"
        # an unsigned press is refused before anything is read
        status, _ = await _unsigned(fake, interactions, reply)
        assert status == 401
        assert await votes() == [(HUMAN, -1), ("U0SECOND", -1)]


async def _unsigned(fake: FakeSlack, url: str, reply: Any) -> tuple[int, bytes]:
    action = reply.blocks[-1]["elements"][0]["action_id"]
    return await fake.click_button(url, reply, action, user="U0FORGER", signed=False)
