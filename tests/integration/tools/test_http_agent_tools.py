"""AGENT=http and the tool contract: the service answers {"tool_calls": [...]}, the gateway
runs them under the policy and POSTs the turn again with "tool_exchange" filled in."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from gateway.agents.http import HttpAgent
from tests.integration.agents.test_http_agent import SECRET, AgentService
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


class ToolUsingService(AgentService):
    async def _turn(self, request: web.Request) -> web.Response:
        body = await request.read()
        assert self._verified(request, body)
        payload = json.loads(body)
        self.payloads.append(payload)
        if not payload["tool_exchange"]:
            return web.json_response(
                {
                    "content": "checking",
                    "tool_calls": [
                        {
                            "id": "h1",
                            "type": "function",
                            "function": {"name": "current_time", "arguments": "{}"},
                        },
                        {"id": "h2", "function": {"name": "shell.rm", "arguments": "{}"}},
                    ],
                }
            )
        results = [m for m in payload["tool_exchange"] if m["role"] == "tool"]
        return web.json_response({"replies": [{"text": f"got {len(results)} results"}]})


async def test_http_agent_tool_calls_run_under_policy_and_come_back_in_tool_exchange(
    database_url: str, sink: SinkServer
) -> None:
    service = await ToolUsingService().start()
    adapter = SinkAdapter(sink.url)
    try:
        async with running_gateway(
            database_url,
            adapters=[adapter],
            agent=HttpAgent(url=service.url, secret=SECRET),
            web_chat=False,
        ) as gw:
            out = await adapter.submit({"chat": "c", "thread": "H", "id": "1", "text": "time?"})
            await wait_for(lambda: len(sink.accepted) == 1)
            async with gw.store.db.connection() as conn:
                roles = [
                    (r["role"], r["metadata"].get("outcome"))
                    for r in await conn.fetch(
                        "SELECT role, metadata FROM messages WHERE session_id = $1 ORDER BY seq_no",
                        out.session_id,
                    )
                ]
    finally:
        await service.stop()
    first, second = service.payloads
    assert [t["function"]["name"] for t in first["tools"]] == ["current_time"]
    exchange: list[dict[str, Any]] = second["tool_exchange"]
    assert [m["role"] for m in exchange] == ["assistant", "tool", "tool"]
    assert "timezone" in exchange[1]["content"]
    assert "not available" in exchange[2]["content"]  # never offered: refused
    assert sink.texts_in("c", "H") == ["got 2 results"]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "ok"),
        ("tool", "refused"),
        ("assistant", None),
    ]
