"""The config file (``GATEWAY_CONFIG_FILE``, TOML): what each place is, and what it may cost.

This module only reads the file and hands each capability its own sections; the capability
parses and validates them (profiles and places in ``gateway.profiles``, prices and budgets in
the usage room, the tools file's sections in ``gateway.tools.catalog``). Every error is a
``ConfigError`` on ``GATEWAY_CONFIG_FILE`` whose message starts with the entry it is about
(``[profiles.support].model: ...``), so start-up exits with 2 naming it.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gateway.core.errors import ConfigError

__all__ = ["SECTIONS", "SETTING", "TOOLS_SECTIONS", "ConfigFile", "load_config_file"]

SETTING = "GATEWAY_CONFIG_FILE"
#: the tools file's top-level tables, which may live in the config file too
TOOLS_SECTIONS = frozenset({"mcp", "tools", "access", "settings", "approvers"})
SECTIONS = frozenset({"profiles", "places", "prices", "budgets", "retention"}) | TOOLS_SECTIONS

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ConfigFile:
    """The parsed file: top-level tables by name (absent ones read as empty)."""

    path: Path | None = None
    tables: Mapping[str, Any] = field(default_factory=dict)

    def section(self, name: str) -> Mapping[str, Any]:
        if name not in SECTIONS:
            raise KeyError(name)
        value = self.tables.get(name)
        return value if isinstance(value, Mapping) else _EMPTY

    def has_tools_sections(self) -> bool:
        return any(name in self.tables for name in TOOLS_SECTIONS)

    @staticmethod
    def error(entry: str, message: str) -> ConfigError:
        """A ``ConfigError`` naming ``entry`` (``[profiles.support].model``)."""
        return ConfigError(SETTING, f"{entry}: {message}")


def parse_config_text(text: str, path: Path | None = None) -> ConfigFile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(SETTING, f"not valid TOML: {exc}") from exc
    found = [
        ConfigFile.error(f"[{name}]", f"unknown table; known: {sorted(SECTIONS)}")
        for name in sorted(set(data) - SECTIONS)
    ]
    found += [
        ConfigFile.error(name, "must be a table")
        for name, value in data.items()
        if name in SECTIONS and not isinstance(value, Mapping)
    ]
    if found:
        raise ConfigError.of(found)
    return ConfigFile(path=path, tables=data)


def load_config_file(path: Path | None) -> ConfigFile:
    """The file at ``path``; ``None`` (the setting unset) reads as an empty file."""
    if path is None:
        return ConfigFile()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_config_text(text, path)
