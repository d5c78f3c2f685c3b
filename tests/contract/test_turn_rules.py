"""The rules for an answer being written, on every surface, each read back from the platform
as the person sees it: ``/stop`` while the answer streams (its preview becomes the final
text, marked ``(stopped)``), ``/stop`` while a tool runs (no further tool call starts),
``/stop`` with nothing running (``Nothing to stop.``), a burst of three lines answered once
(``burst_seconds = 2``), a message arriving while an answer is written under
``while_answering = "queue"`` and ``"restart"``, and the question edited (one final answer,
to the new text) or deleted (the preview removed, nothing answered) while its answer streams.

The model is the fake OpenAI-compatible server streaming slowly, behind the real agent; each
surface is its real adapter against its fake (Matrix: a real Synapse). One gateway per
surface and rule set runs its cases one after another, each in a thread of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from gateway.agents.openai import OpenAIAgent
from gateway.runtime.gateway import Gateway
from gateway.tools.catalog import Tool, ToolCaller, ToolSpec
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.harness import running_gateway, settled_answers, wait_for
from testsupport.live_surfaces import NAMES, LiveSurface, SlackSurface, live_surface

LONG = "Here is a long answer: " + " ".join(f"word{n}" for n in range(120)) + "."
#: written whole in about a second and a half
MEDIUM = "A first answer, written whole: " + " ".join(f"part{n}" for n in range(40)) + "."
SECOND = "A second answer that covers it all."
STOPPED = "(stopped)"
NOTHING = "Nothing to stop."


def slow(text: str = LONG) -> Step:
    """``text``, 6 characters every 0.1 s: LONG takes about 14 s, far longer than any case
    waits for it."""
    return Step(text=text, chunk_chars=6, chunk_delay=0.1)


TOOLS = """
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


class ToolLog:
    """Two read tools: ``slow_lookup`` runs until cancelled, ``second_lookup`` at once;
    which started and which finished."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []

    def install(self, gw: Gateway) -> None:
        async def slow_lookup(args: Mapping[str, Any], caller: ToolCaller) -> str:
            self.started.append("slow")
            await asyncio.sleep(30)
            self.finished.append("slow")
            return "found"

        async def second_lookup(args: Mapping[str, Any], caller: ToolCaller) -> str:
            self.started.append("second")
            return "found again"

        assert gw.tools is not None
        for name, handler in (
            ("ops.slow_lookup", slow_lookup),
            ("ops.second_lookup", second_lookup),
        ):
            spec = ToolSpec(
                name=name,
                description="Look something up in the ops records",
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
                source="test",
            )
            gw.tools.catalog.add(Tool(spec=spec, handler=handler), defaults={})


@asynccontextmanager
async def gateway_on(
    name: str, fake: FakeOpenAI, database_url: str, tmp_path: Path, **settings: Any
) -> AsyncIterator[tuple[LiveSurface, Gateway, ToolLog]]:
    tools = ToolLog()
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(TOOLS)
    async with live_surface(name) as s:
        async with running_gateway(
            database_url,
            adapters=s.adapters(),
            agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
            web_chat=name == "web",
            prepare=tools.install,
            AGENT_MODEL="small",
            GATEWAY_TOOLS_FILE=str(tools_file),
            GATEWAY_STREAM_EDIT_SECONDS=0.2,
            **s.settings,
            **settings,
        ) as gw:
            await s.attached(gw)
            yield s, gw, tools


async def count(gw: Gateway, sql: str) -> int:
    async with gw.store.db.connection() as conn:
        return int(await conn.fetchval(sql))


async def previewing(gw: Gateway, before: int) -> None:
    """Waits until a new answer's preview shows (its message's id is kept while it streams)."""

    async def shown() -> bool:
        return await count(gw, "SELECT count(*) FROM stream_previews") > before

    await wait_for(shown, timeout=20, interval=0.05, message="a preview shown")


async def settled(
    s: LiveSurface, gw: Gateway, handle: Any, n: int = 1, seconds: float = 30
) -> list[str]:
    """The thread's answers once there are ``n`` of them and nothing changed for a while (a
    preview edited into its final text, nothing more coming), read again once the gateway is
    idle: on a loaded machine a paced platform's preview can rest longer than those reads
    while its turn still streams (a Discord preview was once taken for the answer)."""

    async def read() -> list[str]:
        await s.refresh(handle)
        return [a.strip() for a in s.answers(handle)]

    await settled_answers(read, count=n, seconds=seconds)
    await idle(gw)  # nothing running, nothing unsent: what the platform shows is final
    final = await read()
    return final if len(final) == n else await settled_answers(read, count=n, seconds=seconds)


async def idle(gw: Gateway) -> None:
    """No turn owed or running, nothing waiting to be delivered."""

    async def quiet() -> bool:
        running = await count(
            gw,
            "SELECT count(*) FROM sessions WHERE turn_requested_seq > turn_done_seq"
            " OR turn_owner IS NOT NULL",
        )
        unsent = await count(
            gw, "SELECT count(*) FROM deliveries WHERE status IN ('pending', 'sending')"
        )
        return running == 0 and unsent == 0

    await wait_for(quiet, timeout=20, interval=0.05, message="the gateway idle")


async def charged(gw: Gateway) -> list[tuple[str, bool]]:
    """The usage ledger, oldest first: each row's kind, and whether it counts tokens both
    ways (prompt and completion)."""
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT kind, prompt_tokens, completion_tokens FROM usage_ledger ORDER BY id"
        )
    return [
        (r["kind"], (r["prompt_tokens"] or 0) > 0 and (r["completion_tokens"] or 0) > 0)
        for r in rows
    ]


def asked(fake: FakeOpenAI, index: int) -> str:
    """Everything the person said in model request ``index``."""
    return "\n".join(fake.turn_requests[index].contents("user"))


@pytest.mark.parametrize("name", NAMES)
async def test_stop_and_queue(
    name: str, fake: FakeOpenAI, database_url: str, tmp_path: Path
) -> None:
    """``while_answering = "queue"`` (the default): ``/stop`` while streaming, again with
    nothing running, ``/stop`` while a tool runs, and a message queued behind an answer."""
    async with gateway_on(name, fake, database_url, tmp_path) as (s, gw, tools):
        # --- /stop while the answer streams: what was written stays, marked stopped
        fake.script.append(slow())
        previews = await count(gw, "SELECT count(*) FROM stream_previews")
        thread = await s.open_thread("tell me everything")
        await previewing(gw, previews)
        await s.in_thread(thread, "/stop")
        [answer] = await settled(s, gw, thread)
        assert answer.endswith(STOPPED), answer
        written = answer.removesuffix(STOPPED).strip()
        assert written and len(written) < len(LONG) and LONG.startswith(written), answer
        await idle(gw)
        assert len(fake.turn_requests) == 1  # cancelled: nothing asked after it
        # the tokens used are charged: the call cut short, estimated
        assert await charged(gw) == [("answer", True)]

        # --- /stop with nothing running says so
        await s.in_thread(thread, "/stop")
        assert await settled(s, gw, thread, 2) == [answer, NOTHING]
        await idle(gw)
        assert len(fake.turn_requests) == 1

        # --- /stop while a tool runs: the tool is cancelled and no further call starts
        fake.script.extend(
            [
                Step(tool_calls=[{"name": "ops__slow_lookup", "arguments": {"q": "api"}}]),
                Step(tool_calls=[{"name": "ops__second_lookup", "arguments": {"q": "api"}}]),
                Step(text="never written"),
            ]
        )
        looked_up = await s.open_thread("lookup the api in the ops records")
        await wait_for(lambda: tools.started == ["slow"], timeout=20, message="the tool running")
        await s.in_thread(looked_up, "/stop")
        assert await settled(s, gw, looked_up) == [STOPPED]
        await idle(gw)
        assert tools.started == ["slow"] and tools.finished == []
        assert len(fake.turn_requests) == 2  # the call that asked for the tool, nothing after
        # the call that asked for the tool is charged
        assert [kind for kind, _ in await charged(gw)][1:] == ["tool_step"]
        fake.script.clear()

        # --- queue: a message while an answer is written is answered after it, whole
        fake.script.extend([Step(text=MEDIUM, chunk_chars=20, chunk_delay=0.1), Step(text=SECOND)])
        previews = await count(gw, "SELECT count(*) FROM stream_previews")
        queued = await s.open_thread("first question")
        await previewing(gw, previews)
        await s.in_thread(queued, "and a second one")
        assert await settled(s, gw, queued, 2) == [MEDIUM, SECOND]
        await idle(gw)
    assert len(fake.turn_requests) == 4
    assert "first question" not in fake.turn_requests[3].contents("user")[-1]
    assert "and a second one" in fake.turn_requests[3].contents("user")[-1]


@pytest.mark.parametrize("name", NAMES)
async def test_burst_and_restart(
    name: str, fake: FakeOpenAI, database_url: str, tmp_path: Path
) -> None:
    """``burst_seconds = 2`` with ``while_answering = "restart"``: three lines within the
    window get one answer that sees them all; a message while an answer streams stops it,
    and one answer covers both."""
    async with gateway_on(
        name,
        fake,
        database_url,
        tmp_path,
        GATEWAY_BURST_SECONDS=2,
        GATEWAY_WHILE_ANSWERING="restart",
    ) as (s, gw, _):
        # --- a burst: one answer to three lines
        fake.script.append(Step(text="One answer to three lines."))
        burst = await s.open_thread("first line")
        await s.in_thread(burst, "second line")
        await s.in_thread(burst, "third line")
        assert await settled(s, gw, burst) == ["One answer to three lines."]
        await idle(gw)
        assert len(fake.turn_requests) == 1
        lines = asked(fake, 0)
        assert all(line in lines for line in ("first line", "second line", "third line")), lines

        # --- restart: the answer being written stops, one answer covers everything
        fake.script.extend([slow(), Step(text=SECOND)])
        previews = await count(gw, "SELECT count(*) FROM stream_previews")
        restarted = await s.open_thread("first question")
        await previewing(gw, previews)
        await s.in_thread(restarted, "and a second one")
        assert await settled(s, gw, restarted) == [SECOND]
        await idle(gw)
        # both model requests are charged, the one the restart cut short too
        assert len(await charged(gw)) == 3
    assert len(fake.turn_requests) == 3
    assert "first question" in asked(fake, 2)
    assert "and a second one" in fake.turn_requests[2].contents("user")[-1]


@pytest.mark.parametrize("name", ["slack", "slack-socket"])
async def test_slacks_stop_button_does_what_stop_does(
    name: str, fake: FakeOpenAI, database_url: str, tmp_path: Path
) -> None:
    """Slack's own stop button (a thread's agent session is ``processing`` while a turn runs
    there): pressed while the answer streams natively, and while a tool runs, it stops the
    answer as ``/stop`` does, and the session is ``active`` again. A press that comes late,
    the answer already written, is answered like a late ``/stop``. Over the Events API and
    over Socket Mode, through slack-bolt and slack_sdk against the fake."""
    async with gateway_on(name, fake, database_url, tmp_path) as (s, gw, tools):
        assert isinstance(s, SlackSurface)
        slack = s.slack

        async def working(thread: Any) -> None:
            def shown() -> bool:
                return slack.agent_sessions.get(("C0GENERAL", thread.ts)) == "processing"

            await wait_for(shown, timeout=20, interval=0.05, message="the stop button shown")

        # --- pressed while the answer streams
        fake.script.append(slow())
        previews = await count(gw, "SELECT count(*) FROM stream_previews")
        thread = await s.open_thread("tell me everything")
        await previewing(gw, previews)
        await working(thread)
        [stream] = [m for m in slack.bot_posts("C0GENERAL") if m.thread_ts == thread.ts]
        assert stream.streaming  # Slack's native stream, which the press stops
        pressed = await slack.user_presses_stop("C0GENERAL", thread.ts)
        assert pressed.payload["event"]["streaming_message_ts"] == [stream.ts]
        [answer] = await settled(s, gw, thread)
        assert answer.endswith(STOPPED), answer
        written = answer.removesuffix(STOPPED).strip()
        assert written and LONG.startswith(written) and len(written) < len(LONG)
        await idle(gw)
        assert slack.agent_sessions[("C0GENERAL", thread.ts)] == "active"
        assert len(fake.turn_requests) == 1

        # --- pressed late: the answer was written; the press is a /stop with nothing running
        late = slack.wrap(
            {
                "type": "agent_session_stopped",
                "channel": "C0GENERAL",
                "user": "U0HUMAN",
                "thread_ts": thread.ts,
                "streaming_message_ts": [],
                "event_ts": slack.next_ts(),
            }
        )
        await slack.deliver(late)
        await slack.deliver(late)  # Slack's retry of it counts once
        assert await settled(s, gw, thread, 2) == [answer, NOTHING]
        await idle(gw)

        # --- pressed while a tool runs: no further tool call starts
        fake.script.extend(
            [
                Step(tool_calls=[{"name": "ops__slow_lookup", "arguments": {"q": "api"}}]),
                Step(tool_calls=[{"name": "ops__second_lookup", "arguments": {"q": "api"}}]),
            ]
        )
        looked_up = await s.open_thread("lookup the api in the ops records")
        await wait_for(lambda: tools.started == ["slow"], timeout=20, message="the tool running")
        await working(looked_up)
        await slack.user_presses_stop("C0GENERAL", looked_up.ts)
        assert await settled(s, gw, looked_up) == [STOPPED]
        await idle(gw)
        assert slack.agent_sessions[("C0GENERAL", looked_up.ts)] == "active"
        assert tools.started == ["slow"] and tools.finished == []
        assert len(fake.turn_requests) == 2


#: previews shown that neither became an answer's final text nor were removed
ORPHANED = "SELECT count(*) FROM stream_previews WHERE reply_seq IS NULL AND NOT deleted"


async def shown(s: LiveSurface, handle: Any) -> list[str]:
    """Waits until the thread shows the bot's answer being written (its preview)."""

    async def there() -> bool:
        await s.refresh(handle)
        return bool(s.answers(handle))

    await wait_for(there, timeout=20, interval=0.05, message="the preview on the platform")
    return s.answers(handle)


async def showing(s: LiveSurface, handle: Any, expected: list[str]) -> None:
    """Waits until the thread shows exactly the bot's ``expected`` answers."""

    async def now() -> bool:
        await s.refresh(handle)
        return [a.strip() for a in s.answers(handle)] == expected

    try:
        await wait_for(now, timeout=20, interval=0.05, message=f"answers {expected}")
    except (AssertionError, TimeoutError):
        raise AssertionError(f"shown {s.answers(handle)!r}, not {expected!r}") from None


@pytest.mark.parametrize("name", NAMES)
async def test_an_edit_or_a_deletion_while_the_answer_streams(
    name: str, fake: FakeOpenAI, database_url: str, tmp_path: Path
) -> None:
    """The question edited while its answer streams: the answer restarts on the new text, and
    the person ends with one final answer, to it (nothing left of the answer to the old
    text). The question deleted while its answer streams: the preview is removed and nothing
    answers it (where the platform tells a bot about deletions)."""
    async with gateway_on(name, fake, database_url, tmp_path) as (s, gw, _):
        # --- an edit: the streaming answer restarts on the new text
        fake.script.extend([slow(), Step(text=SECOND)])
        thread = await s.open_thread("what is the capital of Frnace")
        [preview] = await shown(s, thread)
        assert LONG.startswith(preview.strip()), preview
        await s.edit(thread, "what is the capital of France")
        await showing(s, thread, [SECOND])
        assert await settled(s, gw, thread) == [SECOND]  # and nothing more follows
        await idle(gw)
        assert len(fake.turn_requests) == 2
        # the answer to the old text was cut short, not written whole and then replaced
        assert not fake.turn_requests[0].streamed_whole
        assert fake.turn_requests[0].contents("user")[-1].endswith("Frnace")
        assert fake.turn_requests[1].contents("user")[-1].endswith("the capital of France")
        assert "Frnace" not in asked(fake, 1)
        # the old text's preview became the new answer or was removed, none left behind
        assert await count(gw, ORPHANED) == 0

        # --- a deletion: the preview is removed, nothing answers the question
        if s.deletions_unseen:
            pytest.skip(s.deletions_unseen)
        fake.script.append(slow())
        mistake = await s.open_thread("oops, not meant for you")
        await shown(s, mistake)
        await s.delete(mistake)
        await showing(s, mistake, [])
        await idle(gw)
        assert await settled(s, gw, mistake, 0) == []
        assert await count(gw, ORPHANED) == 0
        assert not any("word" in a for a in s.all_answers()), s.all_answers()
    assert len(fake.turn_requests) == 3  # nothing asked again
    assert not fake.turn_requests[2].streamed_whole  # the model request was cancelled
