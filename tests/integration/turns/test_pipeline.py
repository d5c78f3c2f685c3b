"""The thread-exact pipeline end to end in one process: real store, real workers, a sink
surface over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.agents.base import Turn
from gateway.core.domain import Reply
from gateway.core.ports import Intake
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


class RecordingAgent:
    """Answers with what it saw, and records every turn's context."""

    name = "recording"

    def __init__(self, delay: float = 0.0) -> None:
        self.turns: list[Turn] = []
        self.delay = delay
        self.active: dict[int, int] = {}
        self.max_concurrent_per_session = 0

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.active[turn.session_id] = self.active.get(turn.session_id, 0) + 1
        self.max_concurrent_per_session = max(
            self.max_concurrent_per_session, self.active[turn.session_id]
        )
        try:
            self.turns.append(turn)
            if self.delay:
                await asyncio.sleep(self.delay)
            last = turn.new_messages[-1].content
            return [Reply(text=f"re: {last}", model="recording")]
        finally:
            self.active[turn.session_id] -= 1


async def test_two_threads_get_replies_in_their_own_thread_with_their_own_context(
    database_url: str, sink: SinkServer
) -> None:
    agent = RecordingAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False):
        await adapter.submit({"chat": "c1", "thread": "A", "id": "1", "text": "alpha one"})
        await adapter.submit({"chat": "c1", "thread": "B", "id": "2", "text": "beta one"})
        await wait_for(lambda: len(sink.accepted) == 2)
        await adapter.submit({"chat": "c1", "thread": "A", "id": "3", "text": "alpha two"})
        await wait_for(lambda: len(sink.accepted) == 3)

    assert sink.texts_in("c1", "A") == ["re: alpha one", "re: alpha two"]
    assert sink.texts_in("c1", "B") == ["re: beta one"]
    last_a = [t for t in agent.turns if t.key.thread_id == "A"][-1]
    assert [m.content for m in last_a.context] == ["alpha one", "re: alpha one", "alpha two"]
    for turn in agent.turns:
        assert all("beta" not in m.content for m in turn.context) or turn.key.thread_id == "B"
        assert turn.target.thread_id == turn.key.thread_id


async def test_duplicate_inbound_is_answered_once(database_url: str, sink: SinkServer) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        body = {"chat": "c", "thread": "t", "id": "m1", "event_id": "e1", "text": "hi"}
        first = await adapter.submit(body)
        second = await adapter.submit(body)
        third = await adapter.submit({**body, "event_id": "e2"})  # same message, new event id
        assert [first.status, second.status, third.status] == ["accepted", "duplicate", "duplicate"]
        await wait_for(lambda: len(sink.accepted) == 1)
        # give the workers a chance to (wrongly) send a second reply
        await wait_for(lambda: gw.store.outbox.delivery_counts(), timeout=2)
    assert [b["text"] for b in sink.accepted] == ["echo: hi"]


async def test_long_reply_is_split_into_ordered_parts_in_the_same_thread(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url, max_length=50)
    text = " ".join(f"word{i}" for i in range(40))
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        await adapter.submit({"chat": "c", "thread": "t9", "id": "1", "text": text})
        await wait_for(lambda: sink.accepted and "word39" in sink.accepted[-1]["text"])
    parts = sink.texts_in("c", "t9")
    assert len(parts) > 2 and all(len(p) <= 50 for p in parts)
    assert " ".join(parts) == f"echo: {text}"


async def test_retry_after_is_honored_and_the_reply_lands_in_its_thread(
    database_url: str, sink: SinkServer
) -> None:
    sink.script.append(("429", 1))
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        await adapter.submit({"chat": "c", "thread": "T", "id": "1", "text": "hello"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=15)
        text = gw.metrics.render().decode()
    first, second = sink.received
    assert first["target"] == second["target"] and first["key"] == second["key"]
    assert sink.texts_in("c", "T") == ["echo: hello"]
    assert 'gateway_deliveries_total{platform="sink",result="retry"} 1.0' in text


async def test_permanent_failure_is_visible_not_rerouted(
    database_url: str, sink: SinkServer
) -> None:
    sink.script.append(("400", "Bad Request: message thread not found"))
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False) as gw:
        out = await adapter.submit({"chat": "c", "thread": "gone", "id": "1", "text": "x"})

        async def failed() -> bool:
            rows = await gw.store.outbox.deliveries_for_session(out.session_id)
            return bool(rows) and rows[0].status == "failed"

        await wait_for(failed)
        [row] = await gw.store.outbox.deliveries_for_session(out.session_id)
    assert row.last_error == "Bad Request: message thread not found"
    assert row.target.thread_id == "gone"
    assert sink.accepted == []  # never posted somewhere else instead


async def test_new_command_starts_a_fresh_session_for_this_thread_only(
    database_url: str, sink: SinkServer
) -> None:
    agent = RecordingAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False) as gw:
        a1 = await adapter.submit({"chat": "c", "thread": "A", "id": "1", "text": "remember X"})
        b1 = await adapter.submit({"chat": "c", "thread": "B", "id": "2", "text": "remember Y"})
        await wait_for(lambda: len(sink.accepted) == 2)
        await adapter.submit({"chat": "c", "thread": "A", "id": "3", "text": "/new"})
        await wait_for(lambda: len(sink.accepted) == 3)
        a2 = await adapter.submit({"chat": "c", "thread": "A", "id": "4", "text": "fresh"})
        b2 = await adapter.submit({"chat": "c", "thread": "B", "id": "5", "text": "still"})
        await wait_for(lambda: len(sink.accepted) == 5)
        assert a2.session_id != a1.session_id
        assert b2.session_id == b1.session_id
        assert (await gw.store.sessions.get_session(a1.session_id)).status == "closed"
    assert sink.texts_in("c", "A")[1].startswith("Started a new session")
    fresh = [t for t in agent.turns if t.session_id == a2.session_id][-1]
    assert [m.content for m in fresh.context] == ["fresh"]


async def test_help_command_is_answered_by_the_core_in_the_same_thread(
    database_url: str, sink: SinkServer
) -> None:
    agent = RecordingAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False):
        await adapter.submit({"chat": "c", "thread": "H", "id": "1", "text": "/help"})
        await wait_for(lambda: len(sink.accepted) >= 1)
    assert sink.accepted[0]["target"]["thread_id"] == "H"
    assert "/new" in "".join(sink.texts_in("c", "H"))
    assert agent.turns == []


async def test_two_schedulers_never_run_one_session_concurrently_and_answer_each_once(
    database_url: str, sink: SinkServer
) -> None:
    agent = RecordingAgent(delay=0.15)
    one, two = SinkAdapter(sink.url), SinkAdapter(sink.url)
    async with (
        running_gateway(database_url, adapters=[one], agent=agent, web_chat=False) as gw1,
        running_gateway(database_url, adapters=[two], agent=agent, web_chat=False),
    ):
        n = 0
        for burst in range(4):
            for thread in ("A", "B", "C"):
                n += 1
                adapter = one if n % 2 else two
                await adapter.submit(
                    {"chat": "c", "thread": thread, "id": str(n), "text": f"{thread}{burst}"}
                )
            await asyncio.sleep(0.05)

        async def all_handled() -> bool:
            async with gw1.store.db.connection() as conn:
                return bool(
                    await conn.fetchval(
                        "SELECT bool_and(turn_done_seq >= turn_requested_seq) AND count(*) = 3 "
                        "FROM sessions"
                    )
                )

        await wait_for(all_handled, timeout=30)
        await wait_for(lambda: len(sink.accepted) == len(agent.turns), timeout=10)
    assert agent.max_concurrent_per_session == 1
    seen: list[str] = [m.content for t in agent.turns for m in t.new_messages]
    assert sorted(seen) == sorted(f"{t}{b}" for b in range(4) for t in "ABC")  # each once
    for turn in agent.turns:  # and every reply went to its own thread
        assert turn.target.thread_id == turn.key.thread_id
    for body in sink.accepted:
        assert body["text"][4] == body["target"]["thread_id"]


async def test_context_excludes_other_threads_even_with_identical_text(
    database_url: str, sink: SinkServer
) -> None:
    agent = RecordingAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False):
        for i in range(3):
            await adapter.submit({"chat": "c", "thread": "X", "id": f"x{i}", "text": f"same {i}"})
            await adapter.submit({"chat": "c", "thread": "Y", "id": f"y{i}", "text": f"same {i}"})
        await wait_for(lambda: sum(len(t.new_messages) for t in agent.turns) == 6)
    sessions = {t.session_id for t in agent.turns}
    assert len(sessions) == 2
    for turn in agent.turns:
        own = {m.content for m in turn.context if m.role == "user"}
        assert len(own) <= 3


async def test_single_connection_ingress_runs_on_one_leader_and_fails_over(
    database_url: str, sink: SinkServer
) -> None:
    class PollingSink(SinkAdapter):
        """Stands for a long-polling surface: its receive loop must run on one replica."""

        def __init__(self, url: str) -> None:
            super().__init__(url)
            self.polling = False
            self._loop: asyncio.Task[None] | None = None

        async def start(self, intake: Intake) -> None:
            await super().start(intake)
            self._loop = asyncio.create_task(intake.lead("sink-poller", self._poll))

        async def _poll(self) -> None:
            self.polling = True
            try:
                await asyncio.Event().wait()
            finally:
                self.polling = False

        async def stop(self) -> None:
            if self._loop is not None:
                self._loop.cancel()
                await asyncio.gather(self._loop, return_exceptions=True)
            await super().stop()

    one, two = PollingSink(sink.url), PollingSink(sink.url)
    first = running_gateway(database_url, adapters=[one], web_chat=False)
    await first.__aenter__()
    first_running = True
    try:
        await wait_for(lambda: one.polling)
        async with running_gateway(database_url, adapters=[two], web_chat=False):
            await asyncio.sleep(1.5)  # longer than an election round: a second leader would start
            assert (one.polling, two.polling) == (True, False)
            # the follower still takes webhook-style ingress and its replies are delivered
            await two.submit({"chat": "c", "thread": "F", "id": "f1", "text": "from follower"})
            await wait_for(lambda: sink.texts_in("c", "F") == ["echo: from follower"])
            first_running = False
            await first.__aexit__(None, None, None)  # the leader stops (or dies)
            await wait_for(lambda: two.polling, timeout=10)
            assert not one.polling
    finally:
        if first_running:
            await first.__aexit__(None, None, None)
