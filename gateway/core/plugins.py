"""The surface plugin API: what a platform package gives the core.

A surface (a chat platform, or anything else people talk through) is a package beside the
gateway. It exports one ``SurfacePlugin`` through the ``chat_gateway.surfaces`` entry point
group (``[project.entry-points."chat_gateway.surfaces"]`` in its ``pyproject.toml``), and owns:

- its settings: a ``SurfaceSettings`` subclass, each field aliased to its environment name
  (``TELEGRAM_BOT_TOKEN``...), read from the environment and the ``.env`` file like the core's;
  a bad value raises ``ConfigError`` naming the setting (``gateway run`` exits 2);
- whether the settings switch it on (``enabled``) and the factory that builds its
  ``PlatformAdapter`` from its settings, the core settings and the ``AdapterContext``;
- its ``gateway setup <name>`` flags, prompts and the settings they write, and any files
  the platform needs besides (``SetupSpec``);
- its live checks for ``gateway doctor`` and ``gateway setup`` (``checks``; by default the
  adapter's own ``check()``);
- its HTTP routes (``http_routes``; by default the adapter's own), and the path prefixes of
  webhooks it verifies itself (``webhook_prefixes``);
- the reply target of a place nobody wrote in yet (``place_target``: a first post, a
  scheduled answer), built from the place alone;
- its answer settings, as shorthands of the one answer policy's vocabulary
  (``answer_settings``: a ``Shorthand``), and its streaming override
  (``SurfaceSettings.streaming``).

Who is answered is not the surface's to decide: its extract reports ``Facts`` on each
``Envelope`` (direct, mentioned, a reply to the bot, from a bot, the place, the person) and
the core's ingress, the one door every adapter's ``Intake`` passes through, applies the answer
policy with the rules declared here and the place's profile. A surface that reports nothing
is answered nowhere: its messages are kept as context.

Only this module, ``gateway.core.ports``, ``gateway.core.settings`` and
``gateway.core.errors`` are needed to write one; the core never names a platform.
"""

from __future__ import annotations

import argparse
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.ports import AdapterContext, Check, PlatformAdapter
from gateway.core.settings import Settings

#: the entry point group surfaces register in
ENTRY_POINT_GROUP = "chat_gateway.surfaces"


class SurfaceSettings(BaseSettings):
    """Base of a surface's own settings. Subclasses declare fields aliased to their exact
    environment names; ``Settings.surface(cls)`` reads them from the same sources as the
    core's (environment, the same ``.env`` file, the same explicit values)."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        populate_by_name=True,
    )

    def streaming(self) -> bool | None:
        """This surface's override of ``GATEWAY_STREAMING`` (``None``: follow it)."""
        return None


class Prompter(Protocol):
    """Where ``gateway setup`` answers come from (a terminal, or stdin lines without one)."""

    @property
    def interactive(self) -> bool: ...

    def ask(self, prompt: str, *, setting: str, flag: str, secret: bool) -> str:
        """One answer: from the terminal (secrets unechoed), or the next stdin line."""
        ...

    def choose(self, prompt: str, options: tuple[str, ...], default: str) -> str:
        """One of ``options``; without a terminal, ``default``."""
        ...


@dataclass(frozen=True, slots=True)
class SetupFlag:
    """One ``gateway setup`` option (``--token``); surfaces may share one (helps are joined)."""

    flag: str
    help: str


@dataclass(frozen=True, slots=True)
class SetupSpec:
    """``gateway setup <name>``: the flags it takes, how it collects the settings to write
    (flags first, then prompts), the settings that switch the surface on (cleared for the
    other surfaces while this one is checked) and the guide to point at. ``write_files``,
    where the platform needs more than settings (Teams: an app package to upload), writes
    those files into the ``.env`` file's folder once the checks passed, from the settings
    written, and returns their paths."""

    flags: tuple[SetupFlag, ...]
    collect: Callable[[argparse.Namespace, Prompter], dict[str, str]]
    enabling: tuple[str, ...]
    guide: str
    write_files: Callable[[dict[str, str], Path], list[Path]] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Shorthand:
    """A surface's own older answer settings (ids of that platform), each a shorthand for the
    one vocabulary of the answer policy (``gateway.inbound.policy``): ``allowed_chats`` for
    allowed places ``platform:*:ID``, and so on. The names are what an ignored message's reason
    cites (``chat_word`` names a place, ``own_word`` the bot's own message)."""

    platform: str
    chat_word: str = "chat"
    own_word: str = "message"
    allowed_chats: Collection[str] = ()
    allowed_chats_name: str = ""
    allowed_users: Collection[str] = ()
    allowed_users_name: str = ""
    answer_all_chats: Collection[str] = ()
    require_mention: bool = False


S = TypeVar("S", bound=SurfaceSettings)


class SurfacePlugin(ABC, Generic[S]):
    """One surface, as the core sees it. Export an instance (or the class) through the
    ``chat_gateway.surfaces`` entry point group."""

    #: the platform name: the ``platform`` of its adapter and of its session keys
    name: ClassVar[str]
    #: its own settings (``SurfaceSettings`` subclass)
    settings_class: type[S]
    #: ``gateway setup <name>``; None: the surface has no setup command
    setup: ClassVar[SetupSpec | None] = None
    #: path prefixes of webhooks the surface verifies itself (its own signatures): the HTTP
    #: guard does not hold them to its JSON content-type rule
    webhook_prefixes: ClassVar[tuple[str, ...]] = ()
    #: built even when the caller hands the gateway its own surfaces (the web chat: it
    #: follows GATEWAY_WEB_CHAT); such surfaces come after the others
    always: ClassVar[bool] = False
    #: the setting named when the surface cannot be built (a ConfigError without one)
    enabling_setting: ClassVar[str] = ""
    #: the core's answer settings (``GATEWAY_ALLOWED_PLACES``...) apply to it; False for a
    #: surface whose sign-in decides who may post (the web chat)
    core_answer_settings: ClassVar[bool] = True

    @abstractmethod
    def enabled(self, settings: S, core: Settings) -> bool:
        """Whether these settings switch the surface on."""

    @abstractmethod
    def create(self, settings: S, core: Settings, context: AdapterContext) -> PlatformAdapter:
        """Build the adapter (no I/O until its ``start``); raise ``ConfigError`` naming a
        setting when it cannot be built."""

    async def checks(self, adapter: PlatformAdapter) -> list[Check]:
        """Live checks for ``gateway doctor`` and ``gateway setup``: the adapter's own."""
        return list(await adapter.check())

    def http_routes(self, adapter: PlatformAdapter) -> Sequence[Any]:
        """Starlette routes the HTTP app serves for this surface: the adapter's own."""
        return adapter.http_routes()

    def answer_settings(self, settings: S) -> Shorthand:
        """Its own answer settings, as shorthands of the one vocabulary, that the core's
        ingress applies with the ``GATEWAY_*`` ones to every message of this surface: by
        default none (the ``GATEWAY_*`` settings alone)."""
        return Shorthand(platform=self.name)

    def place_target(self, key: SessionKey) -> ReplyTarget:
        """Where a post into ``key``'s place goes when nobody wrote there yet (a first post
        from an agent, a scheduled answer): the chat and the thread as the platform wants
        them on send, with nothing to reply to. By default the key's own parts."""
        return place_target(key)


def place_target(key: SessionKey) -> ReplyTarget:
    """The reply target of a place whose thread id is the one the platform sends with."""
    return ReplyTarget(
        platform=key.platform, scope=key.scope, chat_id=key.chat_id, thread_id=key.thread_id
    )


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A surface package's module ``__getattr__``: each name of ``where`` is imported from its
    module when first asked for, so the command line reads the plugin's settings and setup
    prompts without importing the platform's client library (``__getattr__ =
    lazy_attributes(__name__, {"MyAdapter": "my_surface.adapter"})``)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
