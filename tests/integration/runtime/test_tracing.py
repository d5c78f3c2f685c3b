"""Tracing in one running gateway, spans caught in memory (the SDK's exporter): a message
whose turn calls a tool is one trace, ingest at its root, every step under the turn, each
span with the place's ids and the model call with its model and token counts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.agents.openai import OpenAIAgent
from gateway.core import tracing
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install([exporter], env={}, batch=False)
    try:
        yield exporter
    finally:
        tracing.shutdown()


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_a_message_with_a_tool_call_is_one_trace_of_nested_spans(
    database_url: str, sink: SinkServer, fake: FakeOpenAI, spans: InMemorySpanExporter
) -> None:
    fake.script.extend(
        [
            Step(tool_calls=[{"name": "search_thread", "arguments": {"query": "api"}}]),
            Step(text="About the api.", usage={"prompt_tokens": 40, "completion_tokens": 4}),
        ]
    )
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_STREAMING=False,
    ):
        await adapter.submit({"chat": "c", "thread": "T", "id": "m1", "text": "the api?"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20)
        await wait_for(
            lambda: any(s.name == "delivery.attempt" for s in spans.get_finished_spans()),
            timeout=10,
        )
    done = list(spans.get_finished_spans())
    ingest = _one(done, "ingest")
    turn = _one(done, "turn")
    agent = _one(done, "turn.agent")
    tool = _one(done, "tool.call")
    delivery = _one(done, "delivery.attempt")
    model_calls = [s for s in done if s.name == "model.call"]
    assert len(model_calls) == 2
    mine = [s for s in done if s.context.trace_id == ingest.context.trace_id]
    assert len(mine) == len(done), [s.name for s in done if s not in mine]
    # the tree: ingest > turn > (turn.claim, turn.<stage>..., turn.agent > model.call, tool.call)
    assert _parent(ingest) is None
    assert _parent(turn) == ingest.context.span_id
    assert _parent(_one(done, "turn.claim")) == turn.context.span_id
    assert _parent(_one(done, "turn.context")) == turn.context.span_id
    assert _parent(agent) == turn.context.span_id
    assert {_parent(s) for s in model_calls} == {agent.context.span_id}
    assert _parent(tool) == agent.context.span_id
    assert _parent(delivery) == turn.context.span_id
    for span in mine:
        attributes = dict(span.attributes or {})
        assert attributes["gateway.platform"] == "sink", span.name
        assert attributes["gateway.chat_id"] == "c", span.name
        assert attributes["gateway.thread_id"] == "T", span.name
    for span in (ingest, turn, *model_calls, tool, delivery):
        assert dict(span.attributes or {})["gateway.message_id"] == "m1", span.name
    answer = dict(model_calls[-1].attributes or {})
    assert answer["gen_ai.request.model"] == "small"
    assert (answer["gen_ai.usage.input_tokens"], answer["gen_ai.usage.output_tokens"]) == (40, 4)
    assert dict(tool.attributes or {})["gen_ai.tool.name"] == "search_thread"
    assert dict(delivery.attributes or {})["gateway.attempt"] == 1
