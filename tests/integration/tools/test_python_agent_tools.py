"""The tool contract for AGENT=module:callable agents: turn.tools and turn.toolbox.run."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.agents.base import ToolCall, Turn
from gateway.core.domain import Reply
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


class PythonToolAgent:
    name = "python-tools"

    def __init__(self) -> None:
        self.offered: list[list[str]] = []

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        self.offered.append([t["function"]["name"] for t in turn.tools])
        assert turn.toolbox is not None and turn.toolbox.max_steps >= 1
        results = await turn.toolbox.run(
            [
                ToolCall(id="p1", name="current_time", arguments='{"timezone": "UTC"}'),
                ToolCall(id="p2", name="read_session", arguments='{"session_id": 999}'),
            ],
            content="let me look",
        )
        text = "; ".join(f"{r.name}={r.outcome}" for r in results)
        return [Reply(text=text, model="py")]


async def test_a_python_agent_calls_tools_through_the_toolbox(
    database_url: str, sink: SinkServer
) -> None:
    agent = PythonToolAgent()
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], agent=agent, web_chat=False) as gw:
        out = await adapter.submit(
            {"chat": "c", "thread": "Y", "id": "1", "text": "what time is it in my other thread?"}
        )
        await wait_for(lambda: len(sink.accepted) == 1)
        async with gw.store.db.connection() as conn:
            roles = [
                r["role"]
                for r in await conn.fetch(
                    "SELECT role FROM messages WHERE session_id = $1 ORDER BY seq_no",
                    out.session_id,
                )
            ]
    assert "current_time" in agent.offered[0] and "read_session" in agent.offered[0]
    # read_session refuses sessions the asker does not take part in (an error result)
    assert sink.texts_in("c", "Y") == ["current_time=ok; read_session=error"]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
