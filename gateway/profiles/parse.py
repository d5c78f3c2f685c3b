"""``[profiles.*]`` and ``[places]`` of the config file, parsed and checked.

Every error is a ``ConfigError`` on ``GATEWAY_CONFIG_FILE`` naming its entry
(``[profiles.support].model: ...``): start-up exits with 2, ``gateway profiles check`` says the
same, and a reload keeps the previous profiles.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from gateway.core.config_file import ConfigFile
from gateway.core.errors import ConfigError
from gateway.core.profile import ON_DELETE, ON_EDIT, WhileAnswering
from gateway.inbound.policy import PlacePattern
from gateway.profiles.model import DEFAULT, AnswerRule, Place, Profile, ProfileBook

__all__ = ["KnownTools", "parse_place", "parse_profiles"]

_KEYS = frozenset(
    {
        "system_prompt",
        "model",
        "models",
        "tools",
        "knowledge",
        "answer",
        "streaming",
        "burst_seconds",
        "while_answering",
        "on_edit",
        "on_delete",
        "suggested_prompts",
        "minutes_kb",
    }
)


@dataclass(frozen=True, slots=True)
class KnownTools:
    """What a profile's tool pattern may name: the built-in tools, the tools file's policy
    entries, and every tool of its MCP servers (``server.*``, known only once connected)."""

    names: Collection[str] = ()
    servers: Collection[str] = ()

    def knows(self, pattern: str) -> bool:
        if any(fnmatchcase(name, pattern) for name in self.names):
            return True
        return any(
            fnmatchcase(f"{server}.x", pattern) or pattern.startswith(f"{server}.")
            for server in self.servers
        )


def parse_place(text: str) -> PlacePattern | None:
    """``"*"`` (every place: ``None``) or ``platform:scope:chat[:thread]``, any part ``*``."""
    if text.strip() == "*":
        return None
    if text != text.strip() or any(c.isspace() for c in text):
        raise ValueError(f"place {text!r} has white space in it")
    return PlacePattern.parse(text)


def parse_profiles(
    config: ConfigFile, *, models: Collection[str], tools: KnownTools
) -> ProfileBook:
    """The profiles and places of ``config``. ``models`` are the models profiles may name
    (AGENT_MODELS, or AGENT_MODEL alone)."""
    profiles = {DEFAULT: Profile(name=DEFAULT)}
    # every bad entry is named at once (one ConfigError): one run shows all there is to fix
    found: list[ConfigError] = []
    defined = set(profiles) | set(config.section("profiles"))
    for name, table in config.section("profiles").items():
        try:
            profiles[name] = _profile(name, table, models=models, tools=tools)
        except ConfigError as exc:
            found.append(exc)
    places: list[Place] = []
    for order, (text, profile) in enumerate(config.section("places").items()):
        entry = f'[places]."{text}"'
        try:
            pattern = parse_place(text)
        except ValueError as exc:
            found.append(ConfigFile.error(entry, str(exc)))
            continue
        if not isinstance(profile, str):
            found.append(ConfigFile.error(entry, "must be a profile's name (a string)"))
            continue
        if profile not in defined:
            known = ", ".join(sorted(defined))
            found.append(ConfigFile.error(entry, f"unknown profile {profile!r}; known: {known}"))
            continue
        places.append(Place(text, pattern, profile, order))
    if found:
        raise ConfigError.of(found)
    return ProfileBook(profiles=profiles, places=places)


def _profile(name: str, table: Any, *, models: Collection[str], tools: KnownTools) -> Profile:
    entry = f"[profiles.{name}]"
    if not isinstance(table, Mapping):
        raise ConfigFile.error(entry, "must be a table")
    found = [
        ConfigFile.error(f"{entry}.{key}", f"unknown key; known: {sorted(_KEYS)}")
        for key in sorted(set(table) - _KEYS)
    ]

    def field(key: str, check: Callable[[Any], Any]) -> Any:
        if key not in table:
            return None
        try:
            return check(table[key])
        except (TypeError, ValueError) as exc:
            found.append(ConfigFile.error(f"{entry}.{key}", str(exc)))
            return None

    model = field("model", lambda v: _model(_text(v), models))
    chosen = field("models", lambda v: tuple(_model(m, models) for m in _texts(v)))
    if chosen is not None and not chosen:
        found.append(ConfigFile.error(f"{entry}.models", "must name at least one model"))
    elif model is not None and chosen is not None and model not in chosen:
        found.append(ConfigFile.error(f"{entry}.model", f"{model!r} is not one of its models"))
    if model is None and chosen:
        model = chosen[0]
    if model is not None and chosen is None:
        chosen = (model,)
    profile = Profile(
        name=name,
        system_prompt=field("system_prompt", _text),
        model=model,
        models=chosen,
        tools=field("tools", lambda v: tuple(_tool(p, tools) for p in _texts(v))),
        knowledge=field("knowledge", lambda v: tuple(_texts(v))) or (),
        answer=field("answer", _answer),
        streaming=field("streaming", _flag),
        burst_seconds=field("burst_seconds", _burst),
        while_answering=field("while_answering", _while_answering),
        on_edit=field("on_edit", lambda v: _choice(v, ON_EDIT)),
        on_delete=field("on_delete", lambda v: _choice(v, ON_DELETE)),
        suggested_prompts=field("suggested_prompts", lambda v: tuple(_texts(v))) or (),
        minutes_kb=field("minutes_kb", _kb_name),
    )
    if found:
        raise ConfigError.of(found)
    return profile


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _texts(value: Any) -> Iterable[str]:
    if not isinstance(value, list):
        raise ValueError("must be a list of strings")
    return [_text(v) for v in value]


def _model(value: str, models: Collection[str]) -> str:
    if value not in models:
        raise ValueError(f"model {value!r} is not in AGENT_MODELS ({', '.join(models)})")
    return value


def _tool(pattern: str, tools: KnownTools) -> str:
    if not tools.knows(pattern):
        raise ValueError(f"tool pattern {pattern!r} matches no known tool")
    return pattern


def _kb_name(value: Any) -> str:
    name = _text(value)
    if name != name.strip() or len(name) > 200:
        raise ValueError("must be a knowledge base's name (no surrounding spaces, 200 at most)")
    return name


def _answer(value: Any) -> AnswerRule:
    if value == "mentions" or value == "all":
        return value  # type: ignore[no-any-return]
    raise ValueError('must be "mentions" or "all"')


def _burst(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 10:
        raise ValueError("must be a number of seconds from 0 to 10")
    return float(value)


def _while_answering(value: Any) -> WhileAnswering:
    if value == "queue" or value == "restart":
        return value  # type: ignore[no-any-return]
    raise ValueError('must be "queue" or "restart"')


def _choice(value: Any, choices: tuple[str, ...]) -> Any:
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError("must be " + " or ".join(f'"{c}"' for c in choices))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value
