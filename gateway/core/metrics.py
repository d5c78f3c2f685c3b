"""Prometheus metrics, on a registry owned by one gateway instance (tests run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest


class Metrics:
    # Longer than 80 lines on purpose: one flat declaration per metric the gateway exports
    # (name, help, labels), read as one table; split by area, the names an operator greps
    # for would be spread over several functions (tests/unit/test_layout_limits.py, ALLOWED).
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.inbound = Counter(
            "gateway_inbound_events",
            "Inbound events by platform and outcome",
            ["platform", "outcome"],
            registry=self.registry,
        )
        self.ingest_seconds = Histogram(
            "gateway_ingest_seconds",
            "Durable ingest latency (inbox + session + message, one transaction)",
            ["platform"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self.turns = Counter(
            "gateway_turns", "Turns by outcome", ["platform", "outcome"], registry=self.registry
        )
        self.turn_seconds = Histogram(
            "gateway_turn_seconds",
            "Turn latency (claim to outbox commit)",
            ["platform"],
            registry=self.registry,
        )
        self.agent_seconds = Histogram(
            "gateway_agent_seconds", "Agent latency", ["agent"], registry=self.registry
        )
        # the model provider: requests by outcome (ok, rate_limited, unavailable, timed_out,
        # refused, breaker_open), waits before retries, open breakers (gateway.agents.breakers)
        self.model_requests = Counter(
            "gateway_model_requests",
            "Requests to the model server by model and outcome",
            ["model", "outcome"],
            registry=self.registry,
        )
        self.model_retry_seconds = Histogram(
            "gateway_model_retry_seconds",
            "Seconds waited before retrying a model request (Retry-After or backoff)",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60),
            registry=self.registry,
        )
        self.model_breaker_open = Gauge(
            "gateway_model_breaker_open",
            "1 while a model's circuit breaker is open (as this process last read it)",
            ["model"],
            registry=self.registry,
        )
        # the process over a long run (gateway.runtime.memory)
        self.asyncio_tasks = Gauge(
            "gateway_asyncio_tasks", "asyncio tasks alive in this process", registry=self.registry
        )
        self.python_heap_bytes = Gauge(
            "gateway_python_heap_bytes",
            "Python heap traced by tracemalloc (0 unless it traces)",
            registry=self.registry,
        )
        self.deliveries = Counter(
            "gateway_deliveries",
            "Delivery attempts by platform and result (sent, retry, failed)",
            ["platform", "result"],
            registry=self.registry,
        )
        self.retry_after_seconds = Counter(
            "gateway_retry_after_seconds",
            "Seconds of waiting asked for by platforms (retry_after / Retry-After)",
            ["platform"],
            registry=self.registry,
        )
        # streaming
        self.stream_previews = Counter(
            "gateway_stream_previews",
            "Preview calls while answers stream (sent, edited, deleted, draft, throttled, "
            "skipped, stopped)",
            ["platform", "op"],
            registry=self.registry,
        )
        self.stream_first_text_seconds = Histogram(
            "gateway_stream_first_text_seconds",
            "From the agent being asked to the first text shown in the thread",
            ["platform"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=self.registry,
        )
        self.deliveries_by_status = Gauge(
            "gateway_deliveries_by_status",
            "Delivery rows by status; pending, sending and failed exact, sent exact up to"
            " 10000 and past it approximate (the planner's estimate)",
            ["status"],
            registry=self.registry,
        )
        self.oldest_pending_seconds = Gauge(
            "gateway_oldest_pending_delivery_seconds",
            "Age of the oldest pending delivery",
            registry=self.registry,
        )
        self.prompt_tokens = Histogram(
            "gateway_prompt_tokens",
            "Estimated prompt size sent to the agent (system message + context), in tokens",
            ["model"],
            buckets=(256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144),
            registry=self.registry,
        )
        self.summary_seconds = Histogram(
            "gateway_summary_seconds",
            "Time to write one rolling summary (cold path)",
            registry=self.registry,
        )
        self.minutes = Counter(
            "gateway_minutes_total",
            "Closed sessions' minutes by outcome: written to a knowledge base, skipped (the "
            "place keeps none), retried, failed (cold path)",
            ["outcome"],
            registry=self.registry,
        )
        self.sessions_active = Gauge(
            "gateway_sessions_active",
            "Sessions open for new messages (status active); exact up to 10000, past it"
            " approximate (the planner's estimate)",
            registry=self.registry,
        )
        # --- tools ---
        self.tool_calls = Counter(
            "gateway_tool_calls",
            "Tool calls by tool and outcome (ok, error, refused, timeout, not_approved)",
            ["tool", "outcome"],
            registry=self.registry,
        )
        self.tool_seconds = Histogram(
            "gateway_tool_seconds", "Tool call latency", ["tool"], registry=self.registry
        )
        self.routing_decisions = Counter(
            "gateway_tool_routing_decisions",
            "Per-turn routing decisions by phase (explore = low confidence, read-only bundle)",
            ["phase"],
            registry=self.registry,
        )
        self.approvals = Counter(
            "gateway_tool_approvals",
            "Approval requests by outcome (requested, approved, denied, expired, refused_click)",
            ["outcome"],
            registry=self.registry,
        )

        # supervised loops (gateway.core.lifecycle.supervisor): restarts after a crash, and which
        # are running
        # usage and budgets (gateway.usage)
        self.usage_tokens = Counter(
            "gateway_usage_tokens",
            "Model tokens charged to the usage ledger, by model and kind (prompt, completion)",
            ["model", "kind"],
            registry=self.registry,
        )
        self.budget_refusals = Counter(
            "gateway_budget_refusals",
            "Questions not put to the model because a budget was reached, by limit "
            "(unavailable: the ledger could not be read)",
            ["limit"],
            registry=self.registry,
        )
        self.worker_restarts = Counter(
            "gateway_worker_restarts",
            "Restarts of a supervised loop after it crashed or exited",
            ["worker"],
            registry=self.registry,
        )
        self.worker_up = Gauge(
            "gateway_worker_up",
            "1 while a supervised loop runs, 0 while it is down (waiting to restart)",
            ["worker"],
            registry=self.registry,
        )

    def render(self, *, openmetrics: bool = False) -> bytes:
        """The text exposition, or OpenMetrics (the format that carries exemplars: latency
        buckets linked to traces when tracing is on)."""
        if openmetrics:
            exposition: bytes = openmetrics_latest(self.registry)  # type: ignore[no-untyped-call]
            return exposition
        return generate_latest(self.registry)
