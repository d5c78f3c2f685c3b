"""Prometheus metrics an operator alerts on, and the log context of one inbound message's life:
every line from ingest to delivery names its platform, chat, thread, session and seq."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from gateway.core.logs import is_secret_key
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import running_gateway, wait_for

CONTEXT = ("platform", "chat_id", "thread_id", "session_id", "seq_no")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_metrics_cover_ingest_turns_deliveries_retries_and_sessions(
    database_url: str, sink: SinkServer
) -> None:
    sink.script.append(("429", 0.2))
    adapter = SinkAdapter(sink.url)
    async with (
        running_gateway(database_url, adapters=[adapter]) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        await adapter.submit({"chat": "c", "thread": "A", "id": "1", "text": "one"})
        await adapter.submit({"chat": "c", "thread": "A", "id": "1", "text": "one"})  # again
        await adapter.submit({"chat": "c", "thread": "B", "id": "2", "text": "two"})
        await adapter.submit({"chat": "c", "thread": "C", "id": "3", "text": "/new"})
        await client.post("/web/api/channels/general/messages", json={"text": ""})
        # counted after the row is marked sent, so the gauges below see all three
        sent = 'gateway_deliveries_total{platform="sink",result="sent"} 3.0'
        await wait_for(lambda: sent in gw.metrics.render().decode(), timeout=15)
        text = (await client.get("/metrics")).text

    samples = _samples(text)

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("gateway_inbound_events_total", platform="sink", outcome="accepted") == 3
    assert value("gateway_inbound_events_total", platform="sink", outcome="duplicate") == 1
    assert value("gateway_inbound_events_total", platform="web", outcome="rejected") == 1
    assert value("gateway_ingest_seconds_count", platform="sink") == 4
    assert value("gateway_turn_seconds_count", platform="sink") == 3
    assert value("gateway_agent_seconds_count", agent="echo") == 2  # /new needs no agent
    assert value("gateway_deliveries_total", platform="sink", result="sent") == 3
    assert value("gateway_deliveries_total", platform="sink", result="retry") == 1
    assert value("gateway_retry_after_seconds_total", platform="sink") == 0.2
    assert value("gateway_deliveries_by_status", status="sent") == 3
    assert value("gateway_deliveries_by_status", status="pending") == 0
    assert value("gateway_oldest_pending_delivery_seconds") == 0
    # A and B are open; C was closed by /new
    assert value("gateway_sessions_active") == 2
    # a histogram with buckets (which bucket each ingest lands in is the machine's business:
    # no timed assertion here)
    assert re.search(r'gateway_ingest_seconds_bucket\{le="0.1",platform="sink"\} \d', text)
    assert re.search(r'gateway_ingest_seconds_bucket\{le="\+Inf",platform="sink"\} 4', text)


async def test_every_log_line_of_a_message_life_names_its_place_session_and_seq(
    database_url: str, sink: SinkServer
) -> None:
    adapter = SinkAdapter(sink.url)
    async with running_gateway(database_url, adapters=[adapter], web_chat=False):
        with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
            await adapter.submit({"chat": "c7", "thread": "T7", "id": "m", "text": "hi"})
            await wait_for(lambda: len(sink.accepted) == 1)
            await wait_for(lambda: any(e["event"] == "reply_delivered" for e in logs))

    life = [e for e in logs if e.get("chat_id") == "c7" or e["event"] == "turn_finished"]
    events = [e["event"] for e in life]
    for name in ("inbound_stored", "turn_replies_recorded", "turn_finished", "reply_delivered"):
        assert name in events, events
    for entry in life:
        missing = [k for k in CONTEXT if k not in entry]
        assert not missing, f"{entry['event']} lacks {missing}"
        assert (entry["platform"], entry["chat_id"], entry["thread_id"]) == ("sink", "c7", "T7")
    inbound = next(e for e in life if e["event"] == "inbound_stored")
    finished = next(e for e in life if e["event"] == "turn_finished")
    delivered = next(e for e in life if e["event"] == "reply_delivered")
    assert inbound["seq_no"] == finished["seq_no"] == 1  # the turn names the seq that asked
    assert delivered["seq_no"] == 2  # the reply's own seq
    assert inbound["session_id"] == finished["session_id"] == delivered["session_id"]
    assert [e["event"] for e in life].count("turn_finished") == 1  # one summary line per turn
    assert finished["outcome"] == "answered" and "duration_ms" in finished


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("token", True),
        ("bot_token", True),
        ("GATEWAY_ADMIN_TOKEN", True),
        ("signing_secret", True),
        ("api_key", True),
        ("apiKey", True),
        ("OPENAI_API_KEY", True),
        ("Authorization", True),
        ("password", True),
        ("set_cookie", True),
        ("tokens_used", False),
        ("estimated_prompt_tokens", False),
        ("prompt_tokens", False),
        ("tokenizer", False),
        ("keyboard", False),
    ],
)
def test_only_credentials_are_redacted_not_token_counts(key: str, secret: bool) -> None:
    """Regression: every key containing "token" was redacted, so ``tokens_used`` and
    ``estimated_prompt_tokens`` were logged as ``[redacted]``."""
    assert is_secret_key(key) is secret


def test_json_log_lines_redact_credentials_on_both_paths() -> None:
    """The gateway's own events (written directly) and other libraries' stdlib records (through
    the handler) come out as the same JSON lines, credentials redacted, levels filtered."""
    script = """
import logging, structlog
from gateway.core.logs import configure_logging
configure_logging("json", "info")
log = structlog.get_logger("gateway.sample")
log.debug("hidden_debug")
log.info("own_event", bot_token="s3cret-a", tokens_used=5)
log.bind(chat_id="c1").warning("bound_event", api_key="s3cret-b")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed_event")
logging.getLogger("somelib").warning("foreign %s", "event")
logging.getLogger("httpx").info("GET https://api.telegram.org/bots3cret-d/getMe")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert "s3cret" not in done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["event"], e["level"], e["logger"]) for e in lines] == [
        ("own_event", "info", "gateway.sample"),
        ("bound_event", "warning", "gateway.sample"),
        ("failed_event", "error", "gateway.sample"),
        ("foreign event", "warning", "somelib"),
    ]
    assert lines[0]["bot_token"] == "[redacted]" and lines[0]["tokens_used"] == 5
    assert lines[1]["api_key"] == "[redacted]" and lines[1]["chat_id"] == "c1"
    assert "ZeroDivisionError" in lines[2]["exception"]
    assert all(e["timestamp"].endswith("Z") for e in lines)
