"""Tracing: one OpenTelemetry trace per inbound message, across processes and restarts.

The rest of the gateway calls only this module (``span``, ``annotate``, ``inject``); nothing
else imports ``opentelemetry``. Tracing is off unless the standard ``OTEL_*`` variables ask for
it (``wanted``), and off it costs one module-global check per call: no SDK is imported, no span
object is made, ``inject`` returns None so nothing is stored.

On, the SDK reads its own variables: the exporter's endpoint and headers
(``OTEL_EXPORTER_OTLP_*``), the batch processor's pacing (``OTEL_BSP_*``), the sampler
(``OTEL_TRACES_SAMPLER``), the resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``).
The trace context crosses processes as a W3C ``traceparent`` stored with the message and its
deliveries, so the turn and the sends of another replica, or after a restart, join the trace.
"""

from __future__ import annotations

import contextvars
import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from gateway.core.errors import ConfigError

if TYPE_CHECKING:  # only for the checker: nothing of opentelemetry is imported while off
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

#: the standard variables the gateway reads or leaves to the SDK, documented in
#: docs/how-to/tracing.md (they are not settings: the settings reference does not list them)
VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_BSP_SCHEDULE_DELAY",
)
#: the service name when ``OTEL_SERVICE_NAME`` does not give one
SERVICE_NAME = "chat-gateway"
#: what the exporter variable may name (the OTLP/HTTP exporter of the ``otel`` extra)
EXPORTERS = ("otlp", "otlp_proto_http", "console")

#: None while off: every call below returns at this check
_tracer: Tracer | None = None
_provider: TracerProvider | None = None
#: the place's ids (platform, chat, thread, message) put on every span under the one that set
#: them (``span(..., ids=...)``)
_ids: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "trace_ids", default=None
)
_OFF: AbstractContextManager[None] = nullcontext()


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Do the standard variables ask for traces? An exporter named (other than ``none``), or
    an OTLP endpoint given; ``OTEL_SDK_DISABLED=true`` wins over both."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def enabled() -> bool:
    return _tracer is not None


def configure(env: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on when the variables ask for it; True when it is on. Raises
    ``ConfigError`` (start-up exits 2) when they ask for it and the ``otel`` extra is not
    installed, or name an exporter this build does not ship."""
    env = os.environ if env is None else env
    if not wanted(env):
        return False
    names = [
        n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()
    ]
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise ConfigError(
            "OTEL_TRACES_EXPORTER", f"{', '.join(unknown)} is not one of {', '.join(EXPORTERS)}"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError as exc:
        raise ConfigError(
            "OTEL_TRACES_EXPORTER",
            "traces are asked for but the OpenTelemetry SDK is not installed: "
            "pip install 'chat-gateway[otel]'",
        ) from exc
    exporters: list[SpanExporter] = [
        ConsoleSpanExporter() if n == "console" else OTLPSpanExporter() for n in names
    ]
    install(exporters, env=env)
    return True


def install(
    exporters: list[SpanExporter], *, env: Mapping[str, str] | None = None, batch: bool = True
) -> None:
    """Turn tracing on with these exporters (``configure``'s, or a test's in-memory one;
    ``batch=False`` exports each span as it ends)."""
    global _tracer, _provider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    env = os.environ if env is None else env
    attributes: dict[str, Any] = {
        "service.instance.id": f"{socket.gethostname()}:{os.getpid()}",
        "process.pid": os.getpid(),
    }
    if not env.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = SERVICE_NAME
    # Resource.create adds OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME over these
    provider = TracerProvider(resource=Resource.create(attributes))
    for exporter in exporters:
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
    shutdown()
    _provider = provider
    _tracer = provider.get_tracer("chat-gateway")


def shutdown() -> None:
    """Export what is still buffered and turn tracing off (the gateway's last step)."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        provider.shutdown()


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    /,
    *,
    parent: str | None = None,
    ids: Mapping[str, Any] | None = None,
    start: datetime | None = None,
    **more: Any,
) -> AbstractContextManager[None]:
    """A span around the block, the current one's child, or ``parent``'s (a stored
    ``traceparent``: the trace goes on from another process). ``ids``: the place's ids, put
    on this span and every span under it. ``start``: the span began then (a wait that began
    before this process knew of it). ``attributes`` (dotted names) and ``more`` are the
    span's own attributes; None values are left out."""
    if _tracer is None:
        return _OFF
    return _span(name, parent, ids, start, {**(attributes or {}), **more})


@contextmanager
def _span(
    name: str,
    parent: str | None,
    ids: Mapping[str, Any] | None,
    start: datetime | None,
    attributes: Mapping[str, Any],
) -> Iterator[None]:
    assert _tracer is not None
    bound = _ids.get() or {}
    token = None
    if ids:
        bound = {**bound, **_clean(ids)}
        token = _ids.set(bound)
    try:
        with _tracer.start_as_current_span(
            name,
            context=extract(parent) if parent else None,
            attributes={**bound, **_clean(attributes)},
            start_time=None if start is None else int(start.timestamp() * 1e9),
        ):
            yield
    finally:
        if token is not None:
            _ids.reset(token)


def annotate(attributes: Mapping[str, Any] | None = None, /, **more: Any) -> None:
    """Attributes on the current span, known only once its work is done (token counts)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(_clean({**(attributes or {}), **more}))


def inject() -> str | None:
    """The current span's W3C ``traceparent``, to store with what another process picks up;
    None while off or outside any span."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def extract(traceparent: str | None) -> Any:
    """The context a stored ``traceparent`` names (an OpenTelemetry ``Context``), or None
    while off or when there is none."""
    if _tracer is None or not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


class Place(Protocol):
    """What names a place: a ``SessionKey`` or a ``ReplyTarget``."""

    @property
    def platform(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def chat_id(self) -> str: ...
    @property
    def thread_id(self) -> str | None: ...


def place_ids(place: Place, **more: Any) -> dict[str, Any]:
    """The ids a span of this place carries (``span(..., ids=...)``): platform, scope, chat and
    thread, plus ``more`` as ``gateway.<name>`` (the session, the message)."""
    return {
        "gateway.platform": place.platform,
        "gateway.scope": place.scope,
        "gateway.chat_id": place.chat_id,
        "gateway.thread_id": place.thread_id,
        **{f"gateway.{name}": value for name, value in more.items()},
    }


def exemplar() -> dict[str, str] | None:
    """The current span's ids as a Prometheus exemplar (``observe(value, exemplar=...)``), so a
    latency histogram's bucket links to a trace in the OpenMetrics exposition; None while off
    or outside any span."""
    if _tracer is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
    }


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attributes.items() if v is not None}
