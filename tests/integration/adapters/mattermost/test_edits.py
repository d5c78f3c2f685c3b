"""Edits and deletions on Mattermost, end to end (the fake's ``post_edited`` /
``post_deleted`` websocket events -> the real core -> ``PUT posts/{id}/patch`` /
``DELETE posts/{id}`` on the fake): after the answer, an edited question's answer is edited
in place, and with ``on_delete = "retract"`` a deleted question's answer is deleted."""

from __future__ import annotations

from adapters.mattermost.adapter import MattermostAdapter
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.harness import running_gateway, wait_for
from testsupport.mattermost import connected, make_config


async def test_an_edit_rewrites_the_answer_and_a_deletion_retracts_it(
    fake: FakeMattermost, database_url: str
) -> None:
    adapter = MattermostAdapter(make_config(fake))
    async with running_gateway(
        database_url, adapters=[adapter], web_chat=False, GATEWAY_ON_DELETE="retract"
    ):
        await connected(adapter)
        asked = await fake.user_posts(fake.town_square, "how mnay?", mention_bot=True)

        def answers() -> list[dict[str, object]]:
            return fake.posts_in(fake.town_square, root_id=asked["id"], by=fake.bot)

        (reply,) = await wait_for(answers, message="the reply")
        await fake.edit_post(asked["id"], "@gatewaybot how many?")

        def rewritten() -> list[tuple[str, str, str, str]]:
            return [e for e in fake.edits if e[0] == reply["id"]]

        (edit,) = await wait_for(rewritten, message="the answer edited")
        await fake.delete_post(asked["id"])
        await wait_for(lambda: reply["id"] in fake.deleted, message="the answer deleted")
    assert edit[3] == "echo: @gatewaybot how many?"
    assert len(fake.posts_in(fake.town_square, by=fake.bot)) <= 1
