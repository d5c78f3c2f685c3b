"""Tracing in one running gateway, spans caught in memory (the SDK's exporter): a message
whose turn calls a tool is one trace, ingest at its root, every step under the turn, each
span with the place's ids and the model call with its model and token counts; the latency
histograms link to the trace by exemplars in the OpenMetrics exposition."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.agents.openai import OpenAIAgent
from gateway.core import tracing
from gateway.core.ports import ApprovalClick
from tests.integration.tools.test_approvals_telegram import POLICY, RESTART, install
from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for


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
    ) as gw:
        await adapter.submit({"chat": "c", "thread": "T", "id": "m1", "text": "the api?"})
        await wait_for(lambda: len(sink.accepted) == 1, timeout=20)
        await wait_for(
            lambda: any(s.name == "delivery.attempt" for s in spans.get_finished_spans()),
            timeout=10,
        )
        async with httpx.AsyncClient(base_url=gw.url) as client:
            plain = (await client.get("/metrics")).text
            scraped = await client.get(
                "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
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
    # OpenMetrics carries exemplars: the turn's latency bucket names this trace and the turn
    assert scraped.headers["content-type"].startswith("application/openmetrics-text")
    trace_id = format(ingest.context.trace_id, "032x")
    exemplars = dict(
        (line.split("{", 1)[0], line.split(" # ", 1)[1])
        for line in scraped.text.splitlines()
        if " # {" in line and "_bucket{" in line
    )
    assert f'trace_id="{trace_id}"' in exemplars["gateway_turn_seconds_bucket"]
    assert (
        f'span_id="{format(turn.context.span_id, "016x")}"'
        in (exemplars["gateway_turn_seconds_bucket"])
    )
    assert f'trace_id="{trace_id}"' in exemplars["gateway_ingest_seconds_bucket"]
    assert f'trace_id="{trace_id}"' in exemplars["gateway_tool_seconds_bucket"]
    # the classic text format has no exemplars
    assert " # {" not in plain and "gateway_turn_seconds_bucket" in plain


async def test_an_approval_wait_is_a_span_of_the_message_trace_from_request_to_decision(
    database_url: str,
    sink: SinkServer,
    fake: FakeOpenAI,
    spans: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    tools_file = tmp_path / "tools.toml"
    tools_file.write_text(POLICY)
    runs: list[Mapping[str, Any]] = []
    # the turn parks on the request; after the decision it runs again (a second turn span
    # in the same trace) and the model asks for the same call, which finds it decided
    fake.script.extend(
        [Step(tool_calls=[RESTART]), Step(tool_calls=[RESTART]), Step(text="Restarted.")]
    )
    adapter = SinkAdapter(sink.url)
    async with running_gateway(
        database_url,
        adapters=[adapter],
        agent=OpenAIAgent(base_url=fake.base_url, api_key="k", model="small"),
        web_chat=False,
        AGENT_MODEL="small",
        GATEWAY_STREAMING=False,
        GATEWAY_TOOLS_FILE=str(tools_file),
    ) as gw:
        install(gw, runs)
        await adapter.submit(
            {"chat": "c", "thread": "T", "id": "m1", "text": "restart the api", "user": "ann"}
        )

        async def requested() -> str | None:
            async with gw.store.db.connection() as conn:
                found = await conn.fetchval("SELECT id FROM tool_approvals")
            return None if found is None else str(found)

        approval_id = await wait_for(requested, timeout=20)
        assert approval_id is not None
        outcome = await gw.interactions.approval_click(
            ApprovalClick(
                platform="sink",
                approval_id=approval_id,
                user_id="ann",
                approve=True,
                chat_id="c",
                thread_id="T",
            )
        )
        assert outcome.outcome == "approved", outcome
        await wait_for(
            lambda: any(b.get("text") == "Restarted." for b in sink.accepted), timeout=20
        )
        await wait_for(
            lambda: (
                len([s for s in spans.get_finished_spans() if s.name == "delivery.attempt"]) >= 2
            ),
            timeout=10,
        )
    assert runs == [{"service": "api"}]
    done = list(spans.get_finished_spans())
    ingest = _one(done, "ingest")
    wait = _one(done, "approval.wait")
    assert {s.context.trace_id for s in done} == {ingest.context.trace_id}
    turns = [s for s in done if s.name == "turn"]
    assert len(turns) == 2  # parked, then resumed after the decision
    assert {_parent(t) for t in turns} == {ingest.context.span_id}
    # recorded by the resumed turn's agent call, which found the request decided
    [resumed_agent] = [
        s for s in done if s.name == "turn.agent" and _parent(s) == turns[1].context.span_id
    ]
    assert _parent(wait) == resumed_agent.context.span_id
    attributes = dict(wait.attributes or {})
    assert attributes["gateway.approval_id"] == approval_id
    assert attributes["gateway.outcome"] == "approved"
    assert attributes["gateway.chat_id"] == "c"
    [tool] = [s for s in done if s.name == "tool.call"]
    assert dict(tool.attributes or {})["gateway.decision"] == "approved"
    # the wait began with the request, in the first turn
    assert wait.start_time is not None and turns[0].start_time is not None
    assert wait.start_time >= turns[0].start_time
