"""Edits and deletions on every surface, each delivered the way its platform delivers them
(the web chat's PATCH and DELETE, Telegram's ``edited_message``, Slack's signed
``message_changed`` / ``message_deleted``, Mattermost's ``post_edited`` / ``post_deleted``,
Discord's ``MESSAGE_UPDATE`` / ``MESSAGE_DELETE``, Matrix's ``m.replace`` and redaction on a
real Synapse): after the answer, ``on_edit`` and ``on_delete`` decide what the person sees;
before it, a deleted question is never answered. Read back from the platform, not the store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.runtime.gateway import Gateway
from testsupport.agents import GatedEcho
from testsupport.harness import running_gateway, wait_for
from testsupport.live_surfaces import NAMES, LiveSurface, live_surface


@asynccontextmanager
async def gateway_on(
    name: str, database_url: str, agent: GatedEcho, **settings: Any
) -> AsyncIterator[tuple[LiveSurface, Gateway]]:
    async with live_surface(name) as s:
        async with running_gateway(
            database_url,
            adapters=s.adapters(),
            agent=agent,
            web_chat=name == "web",
            GATEWAY_STREAMING=False,
            **s.settings,
            **settings,
        ) as gw:
            await s.attached(gw)
            yield s, gw


async def answered(s: LiveSurface, handle: Any, *texts: str) -> None:
    """Waits until the thread of ``handle`` shows exactly the bot's ``texts``."""

    async def now() -> bool:
        await s.refresh(handle)
        return s.answers(handle) == list(texts)

    try:
        await wait_for(now, timeout=20, interval=0.05, message=f"answers {texts}")
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}; shown: {s.answers(handle)}") from None


async def count(gw: Gateway, sql: str, *args: Any) -> int:
    async with gw.store.db.connection() as conn:
        return int(await conn.fetchval(sql, *args))


async def annotated(gw: Gateway, kind: str) -> None:
    """Waits until the store holds the person's edit or deletion."""

    async def stored() -> bool:
        return await count(gw, "SELECT count(*) FROM message_annotations WHERE kind=$1", kind) > 0

    await wait_for(stored, timeout=20, interval=0.05, message=f"the {kind} stored")


async def idle(gw: Gateway) -> None:
    """Waits until no turn is owed and nothing waits to be delivered."""

    async def quiet() -> bool:
        owed = await count(
            gw, "SELECT count(*) FROM sessions WHERE turn_requested_seq > turn_done_seq"
        )
        unsent = await count(
            gw, "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'sending')"
        )
        return owed == 0 and unsent == 0

    await wait_for(quiet, timeout=20, interval=0.05, message="the gateway idle")


def skip_unseen_deletions(s: LiveSurface) -> None:
    if s.deletions_unseen:
        pytest.skip(s.deletions_unseen)


@pytest.mark.parametrize("name", NAMES)
async def test_an_edit_after_the_answer_rewrites_it_in_place(name: str, database_url: str) -> None:
    agent = GatedEcho()
    async with gateway_on(name, database_url, agent, GATEWAY_ON_EDIT="update") as (s, _):
        asked = await s.say("how mnay legs")
        await answered(s, asked, "echo: " + s.stored_form("how mnay legs"))
        await s.edit(asked, "how many legs")
        # one answer, the same message, now answering the edited question
        await answered(s, asked, "echo: " + s.stored_form("how many legs"))
        await asyncio.sleep(0.3)  # nothing else follows
        await s.refresh(asked)
        assert s.answers(asked) == ["echo: " + s.stored_form("how many legs")]
    assert s.stored_form("how many legs") in agent.asked()


@pytest.mark.parametrize("name", NAMES)
async def test_with_on_edit_context_an_edit_changes_only_later_context(
    name: str, database_url: str
) -> None:
    agent = GatedEcho()
    async with gateway_on(name, database_url, agent, GATEWAY_ON_EDIT="context") as (s, gw):
        asked = await s.say("hello wrold")
        first = "echo: " + s.stored_form("hello wrold")
        await answered(s, asked, first)
        await s.edit(asked, "hello world")
        await annotated(gw, "edit")
        await s.follow_up(asked, "and next")

        async def two() -> bool:
            await s.refresh(asked)
            return len(s.answers(asked)) == 2

        await wait_for(two, timeout=20, interval=0.05, message="the follow-up answered")
        await idle(gw)
        await s.refresh(asked)
        shown = s.answers(asked)
    # nothing answered again: the first answer untouched, one more for the follow-up
    assert shown[0] == first and "and next" in shown[1]
    assert len(agent.turns) == 2
    later = [m.content for m in agent.turns[1].context]
    assert s.stored_form("hello world") in later
    assert s.stored_form("hello wrold") not in later


@pytest.mark.parametrize("name", NAMES)
async def test_a_question_deleted_before_its_answer_is_not_answered(
    name: str, database_url: str
) -> None:
    agent = GatedEcho()
    # one turn worker, held by another question: the deleted one waits as a queued turn
    async with gateway_on(name, database_url, agent, GATEWAY_TURN_WORKERS=1) as (s, gw):
        skip_unseen_deletions(s)
        holding = await s.say("hold everything")
        await wait_for(lambda: agent.turns, timeout=20, message="the first turn running")
        mistake = await s.say("ignore this one")

        async def stored() -> bool:
            return (
                await count(
                    gw,
                    "SELECT count(*) FROM messages WHERE role='user' AND content=$1",
                    s.stored_form("ignore this one"),
                )
                > 0
            )

        await wait_for(stored, timeout=20, interval=0.05, message="the question stored")
        await s.delete(mistake)
        await annotated(gw, "delete")
        agent.release.set()
        await answered(s, holding, "echo: " + s.stored_form("hold everything"))
        await idle(gw)
        await s.refresh(mistake)
        # nothing answers it, in its thread or anywhere (a 1:1 chat is one place)
        assert not any("ignore this one" in a for a in s.all_answers())
    assert agent.asked() == [s.stored_form("hold everything")]


@pytest.mark.parametrize("on_delete", ["keep", "retract"])
@pytest.mark.parametrize("name", NAMES)
async def test_a_deletion_after_the_answer(name: str, on_delete: str, database_url: str) -> None:
    agent = GatedEcho()
    async with gateway_on(name, database_url, agent, GATEWAY_ON_DELETE=on_delete) as (s, gw):
        skip_unseen_deletions(s)
        asked = await s.say("secret question")
        answer = "echo: " + s.stored_form("secret question")
        await answered(s, asked, answer)
        await s.delete(asked)
        await annotated(gw, "delete")
        if on_delete == "retract":
            await answered(s, asked)  # the answer is gone from the platform too
        await idle(gw)
        await s.refresh(asked)
        assert s.answers(asked) == ([] if on_delete == "retract" else [answer])
        retractions = await count(
            gw, "SELECT count(*) FROM deliveries WHERE kind='delete_message' AND status='sent'"
        )
    assert retractions == (1 if on_delete == "retract" else 0)
    assert len(agent.turns) == 1
