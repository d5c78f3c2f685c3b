"""Conversations that change while an answer is written, where one surface has its own way:
``/stop`` of a Telegram draft and the question edited while a draft streams, a stop reaction
on Mattermost, and a stop reaching another replica's answer (``/stop``, bursts,
``while_answering``, and an edit or a deletion while the answer streams on every surface:
``tests/contract/test_turn_rules.py``). The model is the fake OpenAI-compatible server
streaming slowly; each surface is its real adapter (or the web chat's HTTP API) against its
fake."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from adapters.telegram.adapter import TelegramAdapter
from gateway.agents.openai import OpenAIAgent
from gateway.runtime.gateway import Gateway
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, settled_answers, wait_for
from testsupport.mattermost import connected, make_config
from testsupport.telegram import telegram_settings

ANSWER = "Here is a long answer: " + " ".join(f"word{n}" for n in range(120)) + "."
SECOND = "A second answer that covers it all."
STOPPED = "(stopped)"


def slow() -> Step:
    """ANSWER, 6 characters every 0.1 s: about 10 s, far longer than any test waits for it."""
    return Step(text=ANSWER, chunk_chars=6, chunk_delay=0.1)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI(chunk_delay=0.02, chunk_chars=20).start()
    try:
        yield server
    finally:
        await server.stop()


class Surface:
    """One surface as a person uses it: ask in a thread of its own, write again in that
    thread, read the bot's answers there."""

    platform = ""
    settings: Mapping[str, Any] = {}

    def adapters(self) -> list[Any]:
        return []

    async def attached(self, gw: Gateway) -> None:
        self.gw = gw

    async def ask(self, text: str) -> Any:
        raise NotImplementedError

    async def say(self, thread: Any, text: str) -> Any:
        raise NotImplementedError

    async def answers(self, thread: Any) -> list[str]:
        raise NotImplementedError

    async def shown(self) -> bool:
        """An answer's preview shows in its thread (every previewing surface keeps its
        previews' ids while the answer streams)."""
        async with self.gw.store.db.connection() as conn:
            return bool(await conn.fetchval("SELECT count(*) FROM stream_previews"))


class Web(Surface):
    platform = "web"

    def __init__(self, prefix: str = "m") -> None:
        #: the messages' ids start so (two pages on two replicas write different ids)
        self.prefix = prefix

    async def attached(self, gw: Gateway) -> None:
        await super().attached(gw)
        self.client = httpx.AsyncClient(base_url=gw.url)
        self.count = 0

    async def close(self) -> None:
        await self.client.aclose()

    async def _post(self, text: str, thread: str | None) -> str:
        self.count += 1
        msg_id = f"{self.prefix}{self.count}"
        body: dict[str, Any] = {"text": text, "client_msg_id": msg_id}
        if thread is not None:
            body["thread_id"] = thread
        r = await self.client.post("/web/api/channels/turns/messages", json=body)
        assert r.status_code == 200, r.text
        return msg_id

    async def ask(self, text: str) -> Any:
        return await self._post(text, None)

    async def say(self, thread: Any, text: str) -> Any:
        return await self._post(text, thread)

    async def answers(self, thread: Any) -> list[str]:
        r = await self.client.get(f"/web/api/channels/turns/threads/{thread}/messages")
        return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]


class TelegramPrivate(Surface):
    """A private chat: the answer streams as a native draft (sendMessageDraft), then the final
    text is sent once."""

    platform = "telegram"

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.ann = tg.user("Ann")
        self.dm = tg.private(self.ann)

    def adapters(self) -> list[Any]:
        settings = telegram_settings(self.tg)
        return [TelegramAdapter(settings, poll_timeout=1, backoff_initial=0.05, pace=(0.01, 0.01))]

    async def ask(self, text: str) -> Any:
        return None, await self.say(None, text)

    async def say(self, thread: Any, text: str) -> Any:
        return self.tg.user_says(self.dm, text, user=self.ann)

    async def edit(self, message: Any, text: str) -> None:
        self.tg.user_edits(self.dm, message, text)  # an edited_message update

    async def shown(self) -> bool:
        return bool(self.tg.drafts)

    async def answers(self, thread: Any) -> list[str]:
        return [
            str(m["text"])
            for m in self.tg.messages_in(self.dm, None)
            if (m.get("from") or {}).get("id") == self.tg.bot.id
        ]


class Mattermost(Surface):
    platform = "mattermost"

    def __init__(self, mm: FakeMattermost) -> None:
        self.mm = mm

    def adapters(self) -> list[Any]:
        self.adapter = MattermostAdapter(make_config(self.mm))
        return [self.adapter]

    async def attached(self, gw: Gateway) -> None:
        await super().attached(gw)
        await connected(self.adapter)

    async def ask(self, text: str) -> Any:
        post = await self.mm.user_posts(self.mm.town_square, text, mention_bot=True)
        return post["id"]

    async def answers(self, thread: Any) -> list[str]:
        posts = self.mm.posts_in(self.mm.town_square, root_id=thread, by=self.mm.bot)
        return [str(p["message"]) for p in posts]


@asynccontextmanager
async def surface_gateway(
    name: str,
    fake: FakeOpenAI,
    **settings: Any,
) -> AsyncIterator[tuple[Surface, Gateway]]:
    """A gateway on Telegram's private chat (``telegram-private``) or Mattermost."""
    async with AsyncExitStack() as stack:
        s: Surface
        if name == "telegram-private":
            s = TelegramPrivate(await stack.enter_async_context(FakeTelegram()))
        else:
            s = Mattermost(await stack.enter_async_context(FakeMattermost()))
        gw = await stack.enter_async_context(
            running_gateway(
                fake.database_url,  # type: ignore[attr-defined]
                adapters=s.adapters(),
                agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
                AGENT_MODEL="small",
                GATEWAY_STREAM_EDIT_SECONDS=0.2,
                GATEWAY_TOOLS=False,
                **settings,
            )
        )
        await s.attached(gw)
        yield s, gw


@pytest.fixture
def model(fake: FakeOpenAI, database_url: str) -> FakeOpenAI:
    fake.database_url = database_url  # type: ignore[attr-defined]  # where its gateway stores
    return fake


async def previewing(s: Surface) -> None:
    """Wait until an answer's preview (or draft) shows in its thread."""
    for _ in range(150):
        if await s.shown():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no preview was shown")


async def settled(s: Surface, thread: Any, count: int = 1, seconds: float = 20) -> list[str]:
    """The thread's answers once there are ``count`` of them and nothing changed for a while
    (a preview edited into its final text, nothing more coming)."""
    return await settled_answers(
        lambda: s.answers(thread), count=count, seconds=seconds, steady_reads=8
    )


async def turns_done(gw: Gateway) -> None:
    async def done() -> bool:
        async with gw.store.db.connection() as conn:
            return not await conn.fetchval(
                "SELECT count(*) FROM sessions WHERE turn_requested_seq > turn_done_seq"
                " OR turn_owner IS NOT NULL"
            )

    for _ in range(200):
        if await done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("a turn is still running")


# --- /stop --------------------------------------------------------------------------------


async def test_stop_while_a_draft_streams_leaves_one_final_message(model: FakeOpenAI) -> None:
    """A Telegram draft is not a message: stopped, it becomes one final message with what was
    streamed, marked stopped (every surface's /stop: tests/contract/test_turn_rules.py)."""
    model.script.append(slow())
    async with surface_gateway("telegram-private", model) as (s, gw):
        assert isinstance(s, TelegramPrivate)
        thread = await s.ask("tell me everything")
        await previewing(s)
        await asyncio.sleep(0.5)
        await s.say(thread, "/stop")
        [answer] = await settled(s, thread)
        await turns_done(gw)
        async with gw.store.db.connection() as conn:
            charged = await conn.fetch(
                "SELECT kind, prompt_tokens, completion_tokens FROM usage_ledger"
            )
    assert answer.endswith(STOPPED)
    written = answer.removesuffix(STOPPED).strip()
    assert written and len(written) < len(ANSWER) and ANSWER.startswith(written)
    # the model request was cancelled: nothing asked after it, "Nothing to stop." not said
    assert len(model.turn_requests) == 1
    # the draft became one final message with what was streamed
    assert len(s.tg.sent_to(s.dm)) == 1
    assert all(written.startswith(d[3].rstrip()) for d in s.tg.drafts)
    # the tokens used are charged
    assert [c["kind"] for c in charged] == ["answer"]
    assert charged[0]["completion_tokens"] > 0 and charged[0]["prompt_tokens"] > 0


# --- the question edited while its draft streams ----------------------------------------


async def test_an_edit_while_a_draft_streams_restarts_the_draft(model: FakeOpenAI) -> None:
    """A Telegram private chat's draft restarts on the edited text: one draft for the turn,
    then one message, the answer to the new text (an edit or a deletion while a preview
    streams, on every surface: tests/contract/test_turn_rules.py)."""
    model.script.extend([slow(), Step(text=SECOND)])
    async with surface_gateway("telegram-private", model) as (s, gw):
        assert isinstance(s, TelegramPrivate)
        thread = await s.ask("what is the capital of Frnace")
        await previewing(s)
        await s.edit(thread[1], "what is the capital of France")
        # one final answer, to the new text; the old one never next to it
        assert await settled(s, thread) == [SECOND]
        await turns_done(gw)
    first, second = model.turn_requests
    assert first.contents("user")[-1].endswith("Frnace")
    assert second.contents("user")[-1].endswith("what is the capital of France")
    # the draft restarted: one draft for the turn, then one message
    assert len({d[2] for d in s.tg.drafts}) == 1
    assert len(s.tg.sent_to(s.dm)) == 1


async def test_a_stop_reaction_on_the_streaming_answer_stops_it(model: FakeOpenAI) -> None:
    """⏹ on the half-written answer (Mattermost's reaction event) does what /stop does."""
    model.script.append(slow())
    async with surface_gateway("mattermost", model) as (s, gw):
        assert isinstance(s, Mattermost)
        thread = await s.ask("tell me everything")
        await previewing(s)
        [preview] = await wait_for(lambda: s.mm.bot_posts(), timeout=10)
        await s.mm.react(preview["id"], "black_square_for_stop")
        [answer] = await settled(s, thread)
        await turns_done(gw)
    assert answer.endswith(STOPPED) and ANSWER.startswith(answer.removesuffix(STOPPED).strip())
    assert len(model.turn_requests) == 1


async def test_stop_reaches_the_answer_written_by_another_replica(
    model: FakeOpenAI, database_url: str
) -> None:
    """Two replicas on one database: the question arrives at one, which writes the answer;
    ``/stop`` arrives at the other and stops it through the session row."""
    model.script.append(slow())
    agent = OpenAIAgent(base_url=model.base_url, api_key="k", model="small")
    settings: dict[str, Any] = {"AGENT_MODEL": "small", "GATEWAY_TOOLS": False}
    async with (
        running_gateway(database_url, agent=agent, **settings) as one,
        running_gateway(database_url, agent=agent, GATEWAY_TURN_WORKERS=1, **settings) as two,
    ):
        first, second = Web("a"), Web("b")
        await first.attached(one)
        await second.attached(two)
        try:
            thread = await first.ask("tell me everything")
            await previewing(first)
            await second.say(thread, "/stop")
            [answer] = await settled(first, thread)
        finally:
            await first.close()
            await second.close()
    assert answer.endswith(STOPPED) and len(model.turn_requests) == 1
