"""AGENT=http: the documented contract, checked by a real service that verifies the signature
with its own code (not the gateway's) exactly as the README tells integrators to."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from gateway.agents.base import ContextMessage, SummaryRequest
from gateway.agents.http import HttpAgent
from gateway.core.domain import SessionKey
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

SECRET = "shared-secret-for-tests"


@dataclass
class AgentService:
    """What an integrator writes: verify, then answer from the turn JSON."""

    secret: str = SECRET
    payloads: list[dict[str, Any]] = field(default_factory=list)
    rejected: int = 0
    answer: Any = None  # overrides the normal answer
    summaries: bool = True
    url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> AgentService:
        app = web.Application()
        app.router.add_post("/turn", self._turn)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/turn"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _verified(self, request: web.Request, body: bytes) -> bool:
        timestamp = request.headers.get("X-Gateway-Timestamp", "")
        signature = request.headers.get("X-Gateway-Signature", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > 300:
            return False
        signed = b"v1:" + timestamp.encode() + b":" + body
        expected = "v1=" + hmac.new(self.secret.encode(), signed, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected, signature)

    async def _turn(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self._verified(request, body):
            self.rejected += 1
            return web.json_response({"error": "bad signature"}, status=401)
        payload = json.loads(body)
        self.payloads.append(payload)
        if payload["kind"] == "summarize":
            if not self.summaries:
                return web.json_response({"error": "turns only"}, status=404)
            return web.json_response({"summary": f"svc summary of {len(payload['messages'])}"})
        if self.answer is not None:
            return web.json_response(self.answer)
        last = payload["new_messages"][-1]["content"]
        return web.json_response(
            {
                "replies": [
                    {
                        "text": f"http: {last}",
                        "model": "svc-model",
                        "tokens_used": 7,
                        "metadata": {"trace": "t-1"},
                    }
                ]
            }
        )


@pytest.fixture
async def service() -> AsyncIterator[AgentService]:
    server = await AgentService().start()
    try:
        yield server
    finally:
        await server.stop()


async def test_the_http_agent_contract(
    database_url: str, service: AgentService, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=HttpAgent(url=service.url, secret=SECRET),
        web_chat=False,
        AGENT_MODEL="small",
    ) as gw:
        await adapter.submit(
            {"chat": "c", "thread": "H", "id": "1", "text": "first", "user": "ann"}
        )
        await wait_for(lambda: len(sink.accepted) == 1)
        out = await adapter.submit(
            {"chat": "c", "thread": "H", "id": "2", "text": "second", "user": "ann"}
        )
        await wait_for(lambda: len(sink.accepted) == 2)
        async with gw.store.db.connection() as conn:
            stored = await conn.fetchrow(
                "SELECT model, tokens_used, metadata FROM messages "
                "WHERE session_id = $1 AND role = 'assistant' ORDER BY seq_no DESC LIMIT 1",
                out.session_id,
            )
    assert service.rejected == 0
    assert sink.texts_in("c", "H") == ["http: first", "http: second"]
    payload = service.payloads[-1]
    assert payload["version"] == 1 and payload["kind"] == "turn"
    assert payload["session"] == {
        "id": out.session_id,
        "key": "sink:test:c:H",
        "platform": "sink",
        "scope": "test",
        "chat_id": "c",
        "thread_id": "H",
        "metadata": {},
    }
    assert payload["target"]["thread_id"] == "H" and payload["target"]["chat_id"] == "c"
    assert payload["model"] == "small"
    assert "Where this conversation is: sink, chat c, thread H" in payload["system_prompt"]
    assert payload["summary"] is None
    ann = {"id": "ann", "name": "ann"}
    assert payload["context"] == [
        {"seq_no": 1, "role": "user", "content": "first", "sender": ann},
        {
            "seq_no": 2,
            "role": "assistant",
            "content": "http: first",
            "sender": {"id": None, "name": None},
        },
        {"seq_no": 3, "role": "user", "content": "second", "sender": ann},
    ]
    assert payload["new_messages"] == [payload["context"][-1]]
    assert payload["limits"]["context_window"] == 8192
    assert payload["limits"]["estimated_prompt_tokens"] > 0
    assert stored["model"] == "svc-model" and stored["tokens_used"] == 7
    assert stored["metadata"]["trace"] == "t-1"


@pytest.mark.parametrize(
    ("secret", "answer", "reason"),
    [
        ("not-the-shared-secret", None, "HTTP 401"),
        (SECRET, {"text": "no list"}, 'no "replies" list'),
        (SECRET, {"replies": [{"content": "x"}]}, '"text" string'),
    ],
    ids=["bad-signature", "no-replies", "bad-reply"],
)
async def test_a_refused_or_malformed_answer_is_an_apology_in_the_thread(
    database_url: str,
    service: AgentService,
    sink: SinkServer,
    secret: str,
    answer: Any,
    reason: str,
) -> None:
    service.answer = answer
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=HttpAgent(url=service.url, secret=secret),
        web_chat=False,
    ):
        await adapter.submit({"chat": "c", "thread": "X", "id": "1", "text": "hi"})
        await wait_for(lambda: len(sink.accepted) == 1)
    [apology] = sink.accepted
    assert apology["target"]["thread_id"] == "X"
    # a plain message in the thread; the reason stays in metadata and logs
    assert apology["text"].startswith("Sorry") and reason not in apology["text"]
    assert service.rejected == (1 if secret != SECRET else 0)


async def test_summaries_over_http_or_extractive_when_the_service_does_not_summarize(
    service: AgentService,
) -> None:
    agent = HttpAgent(url=service.url, secret=SECRET)
    request = SummaryRequest(
        session_id=1,
        key=SessionKey(platform="sink", scope="test", chat_id="c", thread_id="H"),
        model="small",
        instructions="summarize",
        transcript="[1] ann: hi",
        previous=None,
        messages=[ContextMessage(seq_no=1, role="user", content="hi", sender_name="ann")],
        max_output_tokens=128,
    )
    try:
        result = await agent.summarize(request)
        assert result is not None and result.text == "svc summary of 1"
        assert service.payloads[-1]["kind"] == "summarize"
        assert service.payloads[-1]["messages"][0]["content"] == "hi"
        service.summaries = False
        assert await agent.summarize(request) is None  # the worker falls back to excerpts
    finally:
        await agent.aclose()
