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

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import structlog

from gateway.core.config_file import SETTING, ConfigFile, parse_config_text
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
    #: the file read (absolute), ``None`` when the gateway runs without one
    path: str | None = None
    #: SHA-256 of the bytes in force after the reload (hex); on a refusal, those kept
    sha256: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"reloaded": self.ok, "error": self.error, "path": self.path, "sha256": self.sha256}


#: what a reload answers when the gateway was started without a config file
NO_FILE = (
    "the running gateway was started without GATEWAY_CONFIG_FILE, so there is no file to "
    "read again: set it and restart the gateway"
)


def read_config(path: Path | None) -> tuple[ConfigFile, str | None]:
    """The file at ``path`` and the SHA-256 of the bytes parsed (``None``, the setting unset:
    an empty file and no hash)."""
    if path is None:
        return ConfigFile(), None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(SETTING, f"{path} is not UTF-8 text") from exc
    return parse_config_text(text, path), hashlib.sha256(data).hexdigest()


class ConfigWatch:
    """The config file in force and its subscribers (one per gateway)."""

    def __init__(self, path: Path | None, config: ConfigFile | None = None) -> None:
        #: absolute, so that every replica and the command line name one file the same way
        self.path = path.absolute() if path is not None else None
        loaded, self.sha256 = read_config(self.path)
        self.config = config if config is not None else loaded
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
        """Read the file again; every subscriber gets it, or none does. Without a file there
        is nothing to read: refused, saying so."""
        path = str(self.path) if self.path is not None else None
        try:
            if self.path is None:
                raise ConfigError(SETTING, NO_FILE)
            config, sha256 = read_config(self.path)
            prepared = [(s, s.prepare(config)) for s in self._subscribers]
        except ConfigError as exc:
            self.refused += 1
            log.error("config_reload_refused", path=path, error=str(exc))
            return ReloadResult(ok=False, error=str(exc), path=path, sha256=self.sha256)
        for subscriber, value in prepared:
            subscriber.apply(value)
        self.config = config
        self.sha256 = sha256
        self.reloads += 1
        log.info(
            "config_reloaded",
            path=path,
            sha256=sha256,
            subscribers=[s.name for s in self._subscribers],
        )
        return ReloadResult(ok=True, path=path, sha256=sha256)
