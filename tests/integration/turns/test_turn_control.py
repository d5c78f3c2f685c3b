"""Conversations that change while an answer is written, on the web chat and the platforms:
``/stop`` (while the model streams, while a tool runs, with nothing running), a burst of
lines answered once, ``while_answering`` restart against queue, and the question edited or
deleted while its answer streams. The model is the fake OpenAI-compatible server streaming
slowly; each surface is its real adapter (or the web chat's HTTP API) against its fake."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from adapters.telegram.adapter import TelegramAdapter
from adapters.web.extract import SCOPE
from gateway.agents.openai import OpenAIAgent
from gateway.core.domain import Envelope, EventKind, Facts, ReplyTarget, Sender, SessionKey
from gateway.runtime.gateway import Gateway
from gateway.tools.catalog import Tool, ToolCaller, ToolSpec
from testsupport.fakes.mattermost import FakeMattermost
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.telegram import FakeTelegram
from testsupport.harness import running_gateway, wait_for
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
    thread, edit or delete a message, read the bot's answers there."""

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

    async def edit(self, thread: Any, message: Any, text: str) -> None:
        raise NotImplementedError

    async def delete(self, thread: Any, message: Any) -> None:
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

    async def _change(self, thread: str, message: str, kind: EventKind, text: str) -> None:
        # what the web chat's edit and delete buttons submit: the message's own id, changed
        key = SessionKey(platform="web", scope=SCOPE, chat_id="turns", thread_id=thread)
        target = ReplyTarget(platform="web", scope=SCOPE, chat_id="turns", thread_id=thread)
        envelope = Envelope(
            key=key,
            target=target,
            message_id=message,
            text=text,
            sender=Sender(id="local", name="local"),
            kind=kind,
            facts=Facts(place=key, person="local", mentioned=True),
        )
        await self.gw.doors["web"].submit(envelope, raw=None)

    async def edit(self, thread: Any, message: Any, text: str) -> None:
        await self._change(thread, message, EventKind.EDIT, text)

    async def delete(self, thread: Any, message: Any) -> None:
        await self._change(thread, message, EventKind.DELETE, "")

    async def answers(self, thread: Any) -> list[str]:
        r = await self.client.get(f"/web/api/channels/turns/threads/{thread}/messages")
        return [m["content"] for m in r.json()["messages"] if m["role"] == "assistant"]


class Telegram(Surface):
    """A forum topic: the answer streams into a preview message edited as it grows."""

    platform = "telegram"

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg
        self.forum = tg.forum("Team")
        self.ann = tg.user("Ann")
        self.topics = 0

    def adapters(self) -> list[Any]:
        settings = telegram_settings(self.tg)
        return [TelegramAdapter(settings, poll_timeout=1, backoff_initial=0.05, pace=(0.01, 0.01))]

    async def ask(self, text: str) -> Any:
        self.topics += 1
        topic = self.tg.create_topic(self.forum, f"topic {self.topics}", by=self.ann)
        message = await self.say(topic, text)
        return topic, message

    async def say(self, thread: Any, text: str) -> Any:
        topic = thread[0] if isinstance(thread, tuple) else thread
        bot = self.tg.bot.username
        # a command is addressed as Telegram clients write it in a group: /stop@Bot
        said = f"{text}@{bot}" if text.startswith("/") else f"@{bot} {text}"
        return self.tg.user_says(self.forum, said, topic=topic, user=self.ann)

    async def edit(self, thread: Any, message: Any, text: str) -> None:
        self.tg.user_edits(self.forum, message, f"@{self.tg.bot.username} {text}")

    async def answers(self, thread: Any) -> list[str]:
        topic = thread[0]
        return [
            str(m["text"])
            for m in self.tg.messages_in(self.forum, topic)
            if (m.get("from") or {}).get("id") == self.tg.bot.id
        ]


class TelegramPrivate(Telegram):
    """A private chat: the answer streams as a native draft (sendMessageDraft), then the final
    text is sent once."""

    def __init__(self, tg: FakeTelegram) -> None:
        super().__init__(tg)
        self.dm = tg.private(self.ann)

    async def ask(self, text: str) -> Any:
        return None, await self.say(None, text)

    async def say(self, thread: Any, text: str) -> Any:
        return self.tg.user_says(self.dm, text, user=self.ann)

    async def edit(self, thread: Any, message: Any, text: str) -> None:
        self.tg.user_edits(self.dm, message, text)

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

    async def say(self, thread: Any, text: str) -> Any:
        post = await self.mm.user_posts(self.mm.town_square, text, mention_bot=True, root_id=thread)
        return post["id"]

    async def edit(self, thread: Any, message: Any, text: str) -> None:
        await self.mm.edit_post(message, f"@{self.mm.bot.username} {text}")

    async def delete(self, thread: Any, message: Any) -> None:
        await self.mm.delete_post(message)

    async def answers(self, thread: Any) -> list[str]:
        posts = self.mm.posts_in(self.mm.town_square, root_id=thread, by=self.mm.bot)
        return [str(p["message"]) for p in posts]


@asynccontextmanager
async def surface_gateway(
    name: str,
    fake: FakeOpenAI,
    *,
    tools_file: Path | None = None,
    prepare: Any = None,
    **settings: Any,
) -> AsyncIterator[tuple[Surface, Gateway]]:
    async with AsyncExitStack() as stack:
        s: Surface
        if name == "web":
            s = Web()
        elif name == "telegram":
            s = Telegram(await stack.enter_async_context(FakeTelegram()))
        elif name == "telegram-private":
            s = TelegramPrivate(await stack.enter_async_context(FakeTelegram()))
        else:
            s = Mattermost(await stack.enter_async_context(FakeMattermost()))
        extra: dict[str, Any] = {"GATEWAY_TOOLS": False}
        if tools_file is not None:
            extra = {"GATEWAY_TOOLS_FILE": str(tools_file)}
        gw = await stack.enter_async_context(
            running_gateway(
                fake.database_url,  # type: ignore[attr-defined]
                adapters=s.adapters(),
                agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
                web_chat=name == "web",
                prepare=prepare,
                AGENT_MODEL="small",
                GATEWAY_STREAM_EDIT_SECONDS=0.2,
                **extra,
                **settings,
            )
        )
        await s.attached(gw)
        if isinstance(s, Web):
            stack.push_async_callback(s.close)
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
    last: list[str] | None = None
    steady = 0
    for _ in range(int(seconds / 0.1)):
        found = await s.answers(thread)
        if len(found) >= count and found == last:
            steady += 1
            if steady >= 8:
                return found
        else:
            steady = 0
        last = found
        await asyncio.sleep(0.1)
    raise AssertionError(f"answers never settled: {last!r}")


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


@pytest.mark.parametrize("name", ["web", "telegram", "telegram-private", "mattermost"])
async def test_stop_while_streaming_keeps_what_was_written_marked_stopped(
    name: str, model: FakeOpenAI
) -> None:
    model.script.append(slow())
    async with surface_gateway(name, model) as (s, gw):
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
    if isinstance(s, TelegramPrivate):
        # the draft became one final message with what was streamed
        assert len(s.tg.sent_to(s.dm)) == 1
        assert all(written.startswith(d[3].rstrip()) for d in s.tg.drafts)
    # the tokens used are charged
    assert [c["kind"] for c in charged] == ["answer"]
    assert charged[0]["completion_tokens"] > 0 and charged[0]["prompt_tokens"] > 0


@pytest.mark.parametrize("name", ["web", "telegram"])
async def test_stop_with_nothing_running_says_so(name: str, model: FakeOpenAI) -> None:
    model.script.append(Step(text="Short answer."))
    async with surface_gateway(name, model) as (s, _):
        thread = await s.ask("a quick one")
        await settled(s, thread)
        await s.say(thread, "/stop")
        assert await settled(s, thread, 2) == ["Short answer.", "Nothing to stop."]
    assert len(model.turn_requests) == 1


SLOW_TOOL = """
[tools."ops.slow_lookup"]
domains = ["ops"]
operation = "read"
risk = "low"
aliases = ["lookup"]

[tools."ops.second_lookup"]
domains = ["ops"]
operation = "read"
risk = "low"
aliases = ["lookup"]
"""


@pytest.mark.parametrize("name", ["web", "mattermost"])
async def test_stop_while_a_tool_runs_starts_no_further_tool_call(
    name: str, model: FakeOpenAI, tmp_path: Path
) -> None:
    started: list[str] = []
    finished: list[str] = []

    def install(gw: Gateway) -> None:
        async def slow_lookup(args: Mapping[str, Any], caller: ToolCaller) -> str:
            started.append("slow")
            await asyncio.sleep(30)
            finished.append("slow")
            return "found"

        async def second_lookup(args: Mapping[str, Any], caller: ToolCaller) -> str:
            started.append("second")
            return "found again"

        assert gw.tools is not None
        for tool_name, handler in (
            ("ops.slow_lookup", slow_lookup),
            ("ops.second_lookup", second_lookup),
        ):
            spec = ToolSpec(
                name=tool_name,
                description="Look something up in the ops records",
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
                source="test",
            )
            gw.tools.catalog.add(Tool(spec=spec, handler=handler), defaults={})

    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(SLOW_TOOL)
    model.script.extend(
        [
            Step(tool_calls=[{"name": "ops__slow_lookup", "arguments": {"q": "api"}}]),
            Step(tool_calls=[{"name": "ops__second_lookup", "arguments": {"q": "api"}}]),
            Step(text="never written"),
        ]
    )
    async with surface_gateway(name, model, tools_file=tools_file, prepare=install) as (s, gw):
        thread = await s.ask("lookup the api in the ops records")
        await wait_for(lambda: started == ["slow"], timeout=15)
        await s.say(thread, "/stop")
        [answer] = await settled(s, thread)
        await turns_done(gw)
        async with gw.store.db.connection() as conn:
            kinds = [r["kind"] for r in await conn.fetch("SELECT kind FROM usage_ledger")]
    assert answer == STOPPED
    assert started == ["slow"] and finished == []  # cancelled, and nothing after it
    assert len(model.turn_requests) == 1
    assert kinds == ["tool_step"]  # the call that asked for the tool is charged


# --- bursts -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["web", "mattermost"])
async def test_a_burst_of_three_lines_gets_one_answer_that_sees_them_all(
    name: str, model: FakeOpenAI
) -> None:
    model.script.append(Step(text="One answer to three lines."))
    async with surface_gateway(name, model, GATEWAY_BURST_SECONDS=2) as (s, gw):
        thread = await s.ask("first line")
        await asyncio.sleep(0.3)
        await s.say(thread, "second line")
        await asyncio.sleep(0.3)
        await s.say(thread, "third line")
        quiet_from = time.monotonic()
        assert await settled(s, thread) == ["One answer to three lines."]
        await turns_done(gw)
    [request] = model.turn_requests
    asked = "\n".join(request.contents("user"))
    assert all(line in asked for line in ("first line", "second line", "third line"))
    # the turn waited for the thread to be quiet two seconds after the third line
    assert request.started - quiet_from >= 1.8


# --- while an answer is written -----------------------------------------------------------


@pytest.mark.parametrize("mode", ["restart", "queue"])
@pytest.mark.parametrize("name", ["web", "telegram"])
async def test_a_message_while_answering_restarts_or_queues(
    name: str, mode: str, model: FakeOpenAI
) -> None:
    # queued: the first answer is written whole, in about 3 s
    first = slow() if mode == "restart" else Step(text=ANSWER, chunk_chars=30, chunk_delay=0.1)
    model.script.extend([first, Step(text=SECOND)])
    async with surface_gateway(name, model, GATEWAY_WHILE_ANSWERING=mode) as (s, gw):
        thread = await s.ask("first question")
        await previewing(s)
        await s.say(thread, "and a second one")
        if mode == "restart":
            assert await settled(s, thread) == [SECOND]
        else:
            assert await settled(s, thread, 2, seconds=30) == [ANSWER.replace("**", ""), SECOND]
        await turns_done(gw)
        async with gw.store.db.connection() as conn:
            charged = await conn.fetchval("SELECT count(*) FROM usage_ledger")
    # both model requests are charged: the one a restart cut short too
    assert charged == 2
    _, second = model.turn_requests
    assert "first question" in "\n".join(second.contents("user"))
    assert "and a second one" in second.contents("user")[-1]


# --- the question edited or deleted while its answer streams ------------------------------


@pytest.mark.parametrize("name", ["web", "telegram", "telegram-private", "mattermost"])
async def test_an_edit_while_streaming_restarts_on_the_new_text(
    name: str, model: FakeOpenAI
) -> None:
    model.script.extend([slow(), Step(text=SECOND)])
    async with surface_gateway(name, model) as (s, gw):
        thread = await s.ask("what is the capital of Frnace")
        message = thread[1] if isinstance(thread, tuple) else thread
        await previewing(s)
        await s.edit(thread, message, "what is the capital of France")
        # one final answer, to the new text; the old one never next to it
        assert await settled(s, thread) == [SECOND]
        await turns_done(gw)
    first, second = model.turn_requests
    assert first.contents("user")[-1].endswith("Frnace")
    assert second.contents("user")[-1].endswith("what is the capital of France")
    if isinstance(s, TelegramPrivate):
        # the draft restarted: one draft for the turn, then one message
        assert len({d[2] for d in s.tg.drafts}) == 1
        assert len(s.tg.sent_to(s.dm)) == 1


@pytest.mark.parametrize("name", ["web", "mattermost"])
async def test_a_deletion_while_streaming_removes_the_preview(name: str, model: FakeOpenAI) -> None:
    model.script.extend([slow(), Step(text="never asked")])
    async with surface_gateway(name, model) as (s, gw):
        thread = await s.ask("oops, not meant for you")
        await previewing(s)
        if isinstance(s, Mattermost):
            mm = s.mm
            await wait_for(lambda: bool(mm.bot_posts()), timeout=10)
        await s.delete(thread, thread)
        await turns_done(gw)
        await asyncio.sleep(0.5)
        assert await s.answers(thread) == []
        async with gw.store.db.connection() as conn:
            shown = "SELECT count(*) FROM stream_previews WHERE NOT deleted"
            assert await conn.fetchval(shown) == 0
            assert await conn.fetchval("SELECT count(*) FROM deliveries") == 0
    assert len(model.turn_requests) == 1
    if isinstance(s, Mattermost):
        assert [p for p in s.mm.bot_posts() if not p["delete_at"]] == []


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
