"""The registry of surfaces: every ``SurfacePlugin`` installed in the ``chat_gateway.surfaces``
entry point group (the built-in ones are registered there too, in ``pyproject.toml``), and the
extra ``GATEWAY_ADAPTERS`` factories (``module:factory``).

A development checkout's package metadata is not rebuilt when ``pyproject.toml`` changes (the
editable install keeps the entry points it was installed with), so the entry points declared in
the ``pyproject.toml`` beside this package fill in any name the metadata lacks.

It stands on the ground floor: the composition root builds the adapters with it, and a room
that needs a place's reply target (``target_of_place``: schedules, the MCP tools) asks it.
"""

from __future__ import annotations

import functools
import importlib
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings

from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import ConfigError
from gateway.core.plugins import ENTRY_POINT_GROUP, SurfacePlugin, place_target
from gateway.core.ports import AdapterContext, AdapterFactory, PlatformAdapter
from gateway.core.settings import Settings, env_file_path, load_settings, parsed
from gateway.core.settings_groups import settings_groups

#: our own distribution: its surfaces come first, in the order ``pyproject.toml`` lists them
DISTRIBUTION = "chat-gateway"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

Plugin = SurfacePlugin[Any]


def _declared(pyproject: Path) -> list[tuple[str, str]]:
    """``(name, "module:attr")`` of the group in a source tree's ``pyproject.toml``."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return []
    if project.get("name") != DISTRIBUTION:
        return []  # not our source tree (an installed gateway has none beside it)
    group = project.get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return [(str(name), str(value)) for name, value in group.items()]


def _entries() -> Iterator[tuple[str, str]]:
    """Every registered ``(name, "module:attr")``, ours first, each name once."""
    ours = _declared(PYPROJECT)
    from_source = bool(ours)
    others: list[tuple[str, str]] = []
    for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = entry.dist.name if entry.dist is not None else ""
        if dist == DISTRIBUTION and from_source:
            continue  # the source tree's own list is the current one
        (ours if dist == DISTRIBUTION else others).append((entry.name, entry.value))
    seen: set[str] = set()
    for name, value in [*ours, *sorted(others)]:
        if name not in seen:
            seen.add(name)
            yield name, value


def _load(name: str, value: str) -> Plugin:
    found: Any = _import(ENTRY_POINT_GROUP, value, what=f"the surface plugin {name!r}")
    if isinstance(found, type):
        found = found()
    if not isinstance(found, SurfacePlugin):
        raise ConfigError(
            ENTRY_POINT_GROUP, f"{name} = {value!r} is not a gateway.core.plugins.SurfacePlugin"
        )
    return found


@functools.cache
def surface_plugins() -> tuple[Plugin, ...]:
    """Every installed surface plugin, ours first; surfaces built ``always`` (the web chat)
    last. Read once (``surface_plugins.cache_clear()`` reads the entry points again)."""
    found = [_load(name, value) for name, value in _entries()]
    return (*(p for p in found if not p.always), *(p for p in found if p.always))


def find_plugin(name: str) -> Plugin | None:
    return next((p for p in surface_plugins() if p.name == name), None)


def target_of_place(key: SessionKey) -> ReplyTarget:
    """The reply target of ``key``'s place built by its surface from the place alone (a
    first post, a scheduled answer); a surface without a plugin (``GATEWAY_ADAPTERS``) gets
    the key's own parts."""
    plugin = find_plugin(key.platform)
    return place_target(key) if plugin is None else plugin.place_target(key)


def all_settings_classes() -> list[type[BaseSettings]]:
    """The core ``Settings``, the settings groups it holds, and each installed surface's own
    settings class (for a reference of every setting)."""
    return [
        Settings,
        *settings_groups(Settings).values(),
        *(p.settings_class for p in surface_plugins()),
    ]


def check_settings(settings: Settings) -> Settings:
    """Read every installed surface's own settings from the sources of ``settings``: bad ones
    raise one ``ConfigError`` naming each (start-up exits with 2), as core ones do."""
    found: list[ConfigError] = []
    for plugin in surface_plugins():
        try:
            settings.surface(plugin.settings_class)
        except ConfigError as exc:
            found.append(exc)
    if found:
        raise ConfigError.of(found)
    return settings


def load_checked_settings() -> Settings:
    """The settings of a command (``load_settings``) with every surface's own checked: one
    ``ConfigError`` names every bad setting, core and surfaces alike, so one run shows all
    there is to fix."""
    try:
        settings = load_settings()
    except ConfigError as core:
        found = [core]
    else:
        return check_settings(settings)
    # the core settings are bad: the surfaces' own are still read from the same file
    source: dict[str, Any] = {"_env_file": env_file_path()}
    for plugin in surface_plugins():
        cls: type[BaseSettings] = plugin.settings_class
        try:
            parsed(functools.partial(cls, **source))
        except ConfigError as exc:
            found.append(exc)
    raise ConfigError.of(found)


def enabled_plugins(settings: Settings) -> list[Plugin]:
    """The surfaces these settings switch on."""
    return [p for p in surface_plugins() if p.enabled(settings.surface(p.settings_class), settings)]


def streaming_overrides(settings: Settings) -> dict[str, bool]:
    """``{platform: on}`` for each surface whose own setting overrides GATEWAY_STREAMING."""
    found = {p.name: settings.surface(p.settings_class).streaming() for p in surface_plugins()}
    return {name: on for name, on in found.items() if on is not None}


def webhook_prefixes() -> tuple[str, ...]:
    """Paths of webhooks their surfaces verify themselves (signatures, not content types)."""
    return tuple(prefix for p in surface_plugins() for prefix in p.webhook_prefixes)


def build_adapters(
    settings: Settings, context: AdapterContext, *, platforms: bool = True
) -> list[PlatformAdapter]:
    """The surfaces the settings enable, each built by its plugin: the platforms and the extra
    ``GATEWAY_ADAPTERS`` (unless ``platforms`` is false: the caller brings its own), then the
    surfaces built ``always`` (the web chat, which follows GATEWAY_WEB_CHAT)."""
    chosen = [p for p in enabled_plugins(settings) if platforms or p.always]
    adapters = [_create(p, settings, context) for p in chosen if not p.always]
    if platforms:
        for spec in settings.gateway_adapters:
            factory: AdapterFactory = _import("GATEWAY_ADAPTERS", spec, what="the adapter")
            adapters.append(factory(settings, context))
    adapters.extend(_create(p, settings, context) for p in chosen if p.always)
    return adapters


def _create(plugin: Plugin, settings: Settings, context: AdapterContext) -> PlatformAdapter:
    return plugin.create(settings.surface(plugin.settings_class), settings, context)


def _import(setting: str, spec: str, *, what: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        return functools.reduce(getattr, attr.split("."), importlib.import_module(module_name))
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(setting, f"cannot load {what} {spec!r}: {exc}") from exc
