"""Conversations that change, end to end through the web chat (its edit and delete API, the
real core on PostgreSQL, the outbox, the web transport): an edit or deletion before the
answer changes what is answered; after the answer, ``on_edit`` and ``on_delete`` decide, and
every later turn's context reads the newest text without the deleted messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from gateway.agents.base import Turn
from gateway.core.domain import SessionKey
from gateway.runtime.gateway import Gateway
from testsupport.agents import GatedEcho
from testsupport.harness import running_gateway, wait_for

CONFIG = """
[profiles.quiet]
on_edit = "context"

[profiles.tidy]
on_delete = "retract"

[places]
"web:local:quiet" = "quiet"
"web:local:tidy" = "tidy"
"""


@asynccontextmanager
async def web_gateway(
    database_url: str, tmp_path: Path, agent: GatedEcho, **settings: Any
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    async with (
        running_gateway(
            database_url,
            agent=agent,
            GATEWAY_CONFIG_FILE=str(config),
            GATEWAY_STREAMING=False,
            **settings,
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        yield gw, client


class Thread:
    def __init__(self, client: httpx.AsyncClient, channel: str, thread: str) -> None:
        self.client = client
        self.channel = channel
        self.thread = thread
        self.base = f"/web/api/channels/{channel}/threads/{thread}/messages"

    async def say(self, text: str, msg_id: str) -> int:
        body: dict[str, Any] = {"text": text, "client_msg_id": msg_id}
        if msg_id != self.thread:
            body["thread_id"] = self.thread
        posted = await self.client.post(f"/web/api/channels/{self.channel}/messages", json=body)
        assert posted.status_code == 200, posted.text
        return int(posted.json()["seq_no"])

    async def edit(self, seq: int, text: str) -> httpx.Response:
        return await self.client.patch(f"{self.base}/{seq}", json={"text": text})

    async def delete(self, seq: int) -> httpx.Response:
        return await self.client.delete(f"{self.base}/{seq}")

    async def shown(self) -> list[dict[str, Any]]:
        got = await self.client.get(self.base)
        return list(got.json()["messages"])

    async def answers(self) -> list[str]:
        return [m["content"] for m in await self.shown() if m["role"] == "assistant"]

    async def answered(self, *texts: str) -> list[str]:
        """Waits until the thread's answers are exactly ``texts``."""

        async def now() -> list[str]:
            found = await self.answers()
            return found if found == list(texts) else []

        return await wait_for(now, timeout=15, message=f"answers {texts}")


async def deliveries(gw: Gateway, channel: str, thread: str) -> list[Any]:
    key = SessionKey(platform="web", scope="local", chat_id=channel, thread_id=thread)
    session = await gw.store.sessions.find_session(key)
    assert session is not None
    return await gw.store.outbox.deliveries_for_session(session.id)


def seen(turn: Turn) -> list[str]:
    return [m.content for m in turn.context]


async def test_an_edit_or_deletion_before_the_answer_changes_what_is_answered(
    database_url: str, tmp_path: Path
) -> None:
    agent = GatedEcho()
    async with web_gateway(database_url, tmp_path, agent) as (_, client):
        t = Thread(client, "general", "q1")
        await t.say("hold on", "q1")
        await wait_for(lambda: agent.turns, message="the first turn running")
        typo = await t.say("what is teh time", "q2")
        mistake = await t.say("ignore this one", "q3")
        assert (await t.edit(typo, "what is the time")).json()["status"] == "accepted"
        assert (await t.delete(mistake)).json()["status"] == "accepted"
        agent.release.set()
        await t.answered("echo: hold on", "echo: what is the time")
        users = [(m["content"], m["edited"]) for m in await t.shown() if m["role"] == "user"]
    # one turn answered both queued messages: the edited text, never the deleted message
    second = agent.turns[1]
    assert [m.content for m in second.new_messages] == ["what is the time"]
    assert "ignore this one" not in seen(second) and "what is teh time" not in seen(second)
    assert users == [("hold on", False), ("what is the time", True)]
    assert len(agent.turns) == 2


async def test_an_edit_after_the_answer_rewrites_it_in_place_once(
    database_url: str, tmp_path: Path
) -> None:
    agent = GatedEcho()
    async with web_gateway(database_url, tmp_path, agent) as (gw, client):
        t = Thread(client, "general", "r1")
        asked = await t.say("what colour is it", "r1")
        await t.answered("echo: what colour is it")

        async def sent() -> list[Any]:
            rows = await deliveries(gw, "general", "r1")
            return [d for d in rows if d.status == "sent"]

        # the page shows the answer as it is sent; its row is marked sent right after
        [first] = await wait_for(sent, message="the answer's delivery marked sent")
        assert (await t.edit(asked, "what color is it")).json()["status"] == "accepted"
        # the same edit again (a retried request) counts once
        assert (await t.edit(asked, "what color is it")).json()["status"] == "duplicate"
        await t.answered("echo: what color is it")

        async def edited() -> list[Any]:
            rows = await deliveries(gw, "general", "r1")
            return [d for d in rows if d.kind == "edit_message" and d.status == "sent"]

        [rewrite] = await wait_for(edited, timeout=10, message="the answer edited in place")
        # the old answer's message is edited, nothing new is posted
        assert rewrite.platform_message_id == first.platform_message_id
        assert len([d for d in await deliveries(gw, "general", "r1") if d.kind == "text"]) == 1
        await t.say("and tomorrow", "r2")
        await t.answered("echo: what color is it", "echo: and tomorrow")
    assert len(agent.turns) == 3  # the question, its rewrite, the next one
    later = seen(agent.turns[2])
    assert later == ["what color is it", "echo: what color is it", "and tomorrow"]


async def test_a_question_deleted_before_its_answer_is_rewritten_is_not_answered_again(
    database_url: str, tmp_path: Path
) -> None:
    agent = GatedEcho()
    # one turn worker, held by another thread: the rewrite waits as a queued turn
    async with web_gateway(database_url, tmp_path, agent, GATEWAY_TURN_WORKERS=1) as (gw, client):
        t = Thread(client, "general", "w1")
        asked = await t.say("first try", "w1")
        await t.answered("echo: first try")
        await Thread(client, "general", "w2").say("hold everything", "w2")
        await wait_for(lambda: len(agent.turns) == 2, message="the other thread's turn running")
        assert (await t.edit(asked, "second try")).json()["status"] == "accepted"
        assert (await t.delete(asked)).json()["status"] == "accepted"
        agent.release.set()
        await Thread(client, "general", "w2").answered("echo: hold everything")

        async def done() -> bool:
            key = SessionKey(platform="web", scope="local", chat_id="general", thread_id="w1")
            session = await gw.store.sessions.find_session(key)
            assert session is not None
            async with gw.store.db.connection() as conn:
                return bool(
                    await conn.fetchval(
                        "SELECT turn_done_seq >= turn_requested_seq FROM sessions WHERE id = $1",
                        session.id,
                    )
                )

        await wait_for(done, message="the rewrite handled")
        kinds = [d.kind for d in await deliveries(gw, "general", "w1")]
    assert len(agent.turns) == 2  # never asked to answer the deleted question again
    assert kinds == ["text"]


async def test_with_on_edit_context_an_edit_after_the_answer_only_changes_the_context(
    database_url: str, tmp_path: Path
) -> None:
    agent = GatedEcho()
    async with web_gateway(database_url, tmp_path, agent) as (gw, client):
        t = Thread(client, "quiet", "c1")
        asked = await t.say("hello wrold", "c1")
        await t.answered("echo: hello wrold")
        assert (await t.edit(asked, "hello world")).json()["status"] == "accepted"
        await t.say("next", "c2")
        await t.answered("echo: hello wrold", "echo: next")
        kinds = {d.kind for d in await deliveries(gw, "quiet", "c1")}
    assert kinds == {"text"}
    assert len(agent.turns) == 2
    assert seen(agent.turns[1]) == ["hello world", "echo: hello wrold", "next"]


async def test_a_deletion_after_the_answer_keeps_it_by_default(
    database_url: str, tmp_path: Path
) -> None:
    agent = GatedEcho()
    async with web_gateway(database_url, tmp_path, agent) as (gw, client):
        t = Thread(client, "general", "k1")
        asked = await t.say("secret question", "k1")
        await t.answered("echo: secret question")
        assert (await t.delete(asked)).json()["status"] == "accepted"
        assert (await t.delete(asked)).json()["status"] == "duplicate"
        await t.say("what did I ask", "k2")
        await t.answered("echo: secret question", "echo: what did I ask")
        kinds = {d.kind for d in await deliveries(gw, "general", "k1")}
        users = [m["content"] for m in await t.shown() if m["role"] == "user"]
    assert kinds == {"text"}
    assert users == ["what did I ask"]
    # the deleted message left the context; its answer stays
    assert seen(agent.turns[1]) == ["echo: secret question", "what did I ask"]


async def test_with_on_delete_retract_the_answer_is_deleted_as_well(
    database_url: str, tmp_path: Path
) -> None:
    agent = GatedEcho()
    async with web_gateway(database_url, tmp_path, agent) as (gw, client):
        t = Thread(client, "tidy", "d1")
        asked = await t.say("oops wrong thread", "d1")
        await t.answered("echo: oops wrong thread")
        [answer] = await deliveries(gw, "tidy", "d1")
        assert (await t.delete(asked)).json()["status"] == "accepted"

        async def retracted() -> list[Any]:
            rows = await deliveries(gw, "tidy", "d1")
            return [d for d in rows if d.kind == "delete_message" and d.status == "sent"]

        [gone] = await wait_for(retracted, timeout=10, message="the answer deleted")
        assert gone.platform_message_id == answer.platform_message_id
        assert await t.answers() == []
        await t.say("fresh start", "d2")
        await t.answered("echo: fresh start")
    assert seen(agent.turns[1]) == ["fresh start"]


async def test_only_the_author_changes_a_message(database_url: str, tmp_path: Path) -> None:
    agent = GatedEcho()
    async with web_gateway(database_url, tmp_path, agent) as (_, client):
        t = Thread(client, "general", "a1")
        await t.say("mine", "a1")
        await t.answered("echo: mine")
        answer = next(m for m in await t.shown() if m["role"] == "assistant")
        assert (await t.edit(answer["seq_no"], "not yours")).status_code == 404
        assert (await t.edit(999, "nothing there")).status_code == 404
        assert (await t.edit(1, "")).status_code == 422
        assert (await client.patch(f"{t.base}/1", json={"txt": "x"})).status_code == 422
