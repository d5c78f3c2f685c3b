"""One trace per inbound message, across processes: a Slack message is taken in, its turn is
started by one ``gateway run`` process, that process is killed mid-turn (SIGKILL), and a
second replica takes the turn over and delivers the answer. Every span of that message, from
both processes, arrives at a real OTLP/HTTP receiver in ONE trace: the turn and the delivery
of the second process continue the ``traceparent`` stored with the message and its
deliveries (migration 0026)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from testsupport.fakes.openai import FakeOpenAI, Step
from testsupport.fakes.otlp import FakeCollector
from testsupport.harness import wait_for
from testsupport.paths import REPO
from testsupport.process import GatewayProcess, gateway_processes, run_cli
from testsupport.surfaces import surface

pytestmark = pytest.mark.slow

FINAL = "The answer of the second replica."


@pytest.fixture
async def collector() -> AsyncIterator[FakeCollector]:
    server = await FakeCollector().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


def _env(database_url: str, fake: FakeOpenAI, collector: FakeCollector) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "AGENT": "openai",
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENT_MODEL": "small",
        "GATEWAY_TOOLS": "false",
        "GATEWAY_STREAMING": "false",
        "GATEWAY_LEASE_SECONDS": "2",
        "GATEWAY_POLL_SECONDS": "0.2",
        "GATEWAY_WEB_CHAT": "false",
        # tracing on through the standard variables only; spans exported every 100 ms
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }


async def test_a_message_answered_by_a_second_replica_after_a_sigkill_is_one_trace(
    database_url: str, fake: FakeOpenAI, collector: FakeCollector, tmp_path: Path
) -> None:
    # the first turn hangs in the model call (killed there), the taken-over one answers
    fake.script.extend([Step(text="never delivered", delay=60), Step(text=FINAL)])
    async with surface("slack") as s:
        env = {**_env(database_url, fake, collector), **s.process_env()}
        replicas = gateway_processes((env, tmp_path / "a.log"), (env, tmp_path / "b.log"))
        async with replicas as (a, b):  # started side by side
            by_pid: dict[int, GatewayProcess] = {a.proc.pid: a, b.proc.pid: b}
            await s.attached(a)  # Slack's events go to a
            await s.ask("a question")

            # whichever replica claimed the turn has exported its context building by the time
            # the model is asked (the turn's own span is still open: it never arrives from it)
            def turn_started() -> int | None:
                for span in collector.spans:
                    if span.name == "turn.context" and len(fake.requests) >= 1:
                        pid = span.resource.get("process.pid")
                        return pid if isinstance(pid, int) else None
                return None

            first_pid = await wait_for(turn_started, timeout=60, message="no turn began")
            assert first_pid in by_pid, collector.spans
            by_pid[first_pid].kill()
            await by_pid[first_pid].proc.wait()
            [survivor] = [p for pid, p in by_pid.items() if pid != first_pid]

            await wait_for(
                lambda: [m.text for m in s.in_thread()] == [FINAL], timeout=60, message="no answer"
            )
            # a graceful stop exports what the survivor still buffers
            assert await survivor.terminate() == 0
            if survivor is a:
                await b.terminate()
            else:
                await a.terminate()

    # Slack sends app_mention and message for one post: the second is a duplicate, an ingest
    # of its own that stores nothing (so nothing continues its trace)
    ingests = [x for x in collector.spans if x.name == "ingest"]
    [accepted] = [x for x in ingests if x.attributes["gateway.outcome"] == "accepted"]
    duplicates = [x for x in ingests if x is not accepted]
    assert all(x.attributes["gateway.outcome"] == "duplicate" for x in duplicates), ingests
    trace_id = accepted.trace_id
    mine = [x for x in collector.spans if x.trace_id == trace_id]
    # every other span the processes sent belongs to that message's trace
    assert [x for x in collector.spans if x.trace_id != trace_id] == duplicates
    pids = {x.resource.get("process.pid") for x in mine}
    assert pids == set(by_pid), pids
    survivor_pid = survivor.proc.pid
    assert {"turn.claim", "turn.context"} <= collector.names(first_pid)
    assert {
        "turn",
        "turn.claim",
        "turn.context",
        "turn.agent",
        "model.call",
        "delivery.attempt",
    } <= collector.names(survivor_pid)
    # the survivor's turn is the child of the ingest span stored with the message
    [turn] = [x for x in mine if x.name == "turn"]
    assert turn.parent_span_id == accepted.span_id
    # each span carries the place's ids; the model call its model and token counts
    for span in mine:
        assert span.attributes["gateway.platform"] == "slack", span
        assert span.attributes["gateway.chat_id"] == "C0GEN", span
    answered = [
        x for x in mine if x.name == "model.call" and x.resource["process.pid"] == survivor_pid
    ]
    assert answered[0].attributes["gen_ai.request.model"] == "small"
    assert answered[0].attributes["gen_ai.usage.output_tokens"] > 0
    assert all(x.resource["service.name"] == "chat-gateway" for x in mine)


async def test_traces_asked_for_without_the_otel_extra_stop_start_up_with_exit_2(
    database_url: str, tmp_path: Path
) -> None:
    # the interpreter of an install without the extra: the exporter cannot be imported
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nsys.modules['opentelemetry.exporter.otlp.proto.http.trace_exporter'] = None\n"
    )
    code, _, err = await run_cli(
        ["run"],
        {
            "DATABASE_URL": database_url,
            "PYTHONPATH": f"{tmp_path}:{REPO}",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        },
    )
    assert code == 2, err
    assert "configuration error: OTEL_TRACES_EXPORTER:" in err
    assert "pip install 'chat-gateway[otel]'" in err
