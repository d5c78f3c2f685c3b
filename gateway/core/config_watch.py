"""The config file, live: read at start, read again on a reload, handed to every subscriber.

A capability that reads sections of ``GATEWAY_CONFIG_FILE`` (profiles, prices and budgets,
...) subscribes once with two steps: ``prepare(config)`` parses and checks its sections and
raises ``ConfigError`` naming the entry when they are bad; ``apply(prepared)`` makes the result
the one in force. A reload prepares every subscriber first and applies them only when all
succeeded: a broken file changes nothing (the previous sections stay in force, the reason is
logged), and no capability runs on a half-new file.

Reloads come from ``gateway reload`` (``POST /api/v1/reload``), or the signal a service
manager's reload sends (SIGHUP without a terminal, SIGUSR1; ``gateway.ops.cli``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog

from gateway.core.config_file import ConfigFile, load_config_file
from gateway.core.errors import ConfigError

__all__ = ["ConfigWatch", "ReloadResult"]

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Subscriber(Generic[T]):
    name: str
    prepare: Callable[[ConfigFile], T]
    apply: Callable[[T], None]


@dataclass(frozen=True, slots=True)
class ReloadResult:
    ok: bool
    #: why the file was refused (``GATEWAY_CONFIG_FILE: [places]."x": ...``)
    error: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"reloaded": self.ok, "error": self.error}


class ConfigWatch:
    """The config file in force and its subscribers (one per gateway)."""

    def __init__(self, path: Path | None, config: ConfigFile | None = None) -> None:
        self.path = path
        self.config = config if config is not None else load_config_file(path)
        self._subscribers: list[_Subscriber[Any]] = []
        #: reloads that succeeded / were refused (for logs and tests)
        self.reloads = 0
        self.refused = 0

    def subscribe(
        self, name: str, prepare: Callable[[ConfigFile], T], apply: Callable[[T], None]
    ) -> None:
        """Prepare and apply the current file now (a ``ConfigError`` propagates: start-up
        exits with 2), and again on every reload."""
        apply(prepare(self.config))
        self._subscribers.append(_Subscriber(name, prepare, apply))

    def reload(self) -> ReloadResult:
        """Read the file again; every subscriber gets it, or none does."""
        try:
            config = load_config_file(self.path)
            prepared = [(s, s.prepare(config)) for s in self._subscribers]
        except ConfigError as exc:
            self.refused += 1
            log.error("config_reload_refused", path=str(self.path), error=str(exc))
            return ReloadResult(ok=False, error=str(exc))
        for subscriber, value in prepared:
            subscriber.apply(value)
        self.config = config
        self.reloads += 1
        log.info(
            "config_reloaded",
            path=str(self.path),
            subscribers=[s.name for s in self._subscribers],
        )
        return ReloadResult(ok=True)
