"""The tracing room (gateway/core/tracing.py): off unless the standard variables ask for it,
and then free of the SDK; on, spans nest, carry the place's ids, and a stored traceparent
continues a trace."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.core import tracing
from gateway.core.errors import ConfigError
from testsupport.paths import REPO


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracing.install([exporter], env={}, batch=False)
    try:
        yield exporter
    finally:
        tracing.shutdown()


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
    ],
)
def test_only_the_standard_variables_turn_tracing_on(env: dict[str, str], wanted: bool) -> None:
    assert tracing.wanted(env) is wanted


def test_every_variable_is_documented_in_the_how_to() -> None:
    page = (REPO / "docs" / "how-to" / "tracing.md").read_text(encoding="utf-8")
    assert [v for v in tracing.VARIABLES if f"`{v}`" not in page] == []


def test_off_the_calls_do_nothing_and_nothing_of_the_sdk_is_imported() -> None:
    code = (
        "import json, sys\n"
        "from gateway.core import tracing\n"
        "import gateway.turns.scheduler, gateway.outbox.delivery, gateway.inbound.intake\n"
        "assert tracing.configure({}) is False\n"
        "with tracing.span('x', {'a': 1}, ids={'b': 2}) as s:\n"
        "    tracing.annotate(c=3)\n"
        "    assert s is None and tracing.inject() is None\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == []
    # one shared object, no span made per call
    assert tracing.span("a") is tracing.span("b", {"x": 1})


def test_asked_for_without_the_extra_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the exporter's module missing, as without `pip install 'chat-gateway[otel]'`
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ConfigError, match=r"chat-gateway\[otel\]") as raised:
        tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    assert raised.value.setting == "OTEL_TRACES_EXPORTER"
    assert not tracing.enabled()


def test_an_exporter_this_build_does_not_ship_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="zipkin"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert not tracing.enabled()


def test_configure_reads_the_sdk_variables_and_names_the_service() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    try:
        assert tracing.configure(env) is True
        assert tracing.enabled()
        provider = tracing._provider
        assert provider is not None
        assert provider.resource.attributes["service.name"] == "chat-gateway"
        assert "service.instance.id" in provider.resource.attributes
    finally:
        tracing.shutdown()
    assert not tracing.enabled()


def test_spans_nest_carry_the_ids_below_them_and_drop_none(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.span("turn", {"gateway.seq_no": 3}, ids={"gateway.chat_id": "C1", "x": None}):
        with tracing.span("model.call", {"gen_ai.request.model": "small"}):
            tracing.annotate({"gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": None})
    with tracing.span("apart"):
        pass
    model, turn, apart = spans.get_finished_spans()
    assert (model.name, turn.name, apart.name) == ("model.call", "turn", "apart")
    assert model.parent is not None and model.parent.span_id == turn.context.span_id
    assert model.context.trace_id == turn.context.trace_id != apart.context.trace_id
    assert dict(turn.attributes or {}) == {"gateway.seq_no": 3, "gateway.chat_id": "C1"}
    assert dict(model.attributes or {}) == {
        "gateway.chat_id": "C1",
        "gen_ai.request.model": "small",
        "gen_ai.usage.input_tokens": 12,
    }
    assert "gateway.chat_id" not in dict(apart.attributes or {})  # the ids ended with the turn


def test_a_stored_traceparent_continues_the_trace(spans: InMemorySpanExporter) -> None:
    with tracing.span("ingest"):
        stored = tracing.inject()
    assert stored is not None and stored.startswith("00-")
    began = datetime.now(UTC) - timedelta(seconds=5)
    with tracing.span("approval.wait", parent=stored, start=began):
        pass
    ingest, wait = spans.get_finished_spans()
    assert wait.context.trace_id == ingest.context.trace_id
    assert wait.parent is not None and wait.parent.span_id == ingest.context.span_id
    assert wait.start_time is not None and wait.end_time is not None
    assert wait.end_time - wait.start_time >= 5e9
    assert tracing.extract(None) is None
