"""The profiles in force: built from the config file at start, swapped whole on a reload.

Everything a message or a turn asks of them is answered from memory: ``resolve`` is a
memoised walk of the places, ``policy_for`` a per-profile ``ContextPolicy`` built once per
load. No database round trip.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gateway.core.config_file import ConfigFile, load_config_file
from gateway.core.config_watch import ConfigWatch
from gateway.core.domain import SessionKey
from gateway.core.profile import ConversationRules
from gateway.core.settings import Settings
from gateway.profiles.model import Profile, ProfileBook, Resolved
from gateway.profiles.parse import KnownTools, parse_profiles
from gateway.tools.builtin import BUILTIN_SPECS
from gateway.tools.catalog import tools_file_for
from gateway.turns.context import ContextPolicy

__all__ = ["Profiles", "known_tools", "load_book"]


def known_tools(tools_file_path: Path | None, config: ConfigFile) -> KnownTools:
    """What profiles' tool patterns may name: the built-ins, the tools policy's entries and
    its MCP servers' tools (a bad tools section raises ``ConfigError``)."""
    tools = tools_file_for(tools_file_path, config)
    return KnownTools(
        names=frozenset(BUILTIN_SPECS) | frozenset(tools.entries),
        servers=frozenset(s.name for s in tools.servers),
    )


def load_book(settings: Settings, config: ConfigFile | None = None) -> ProfileBook:
    """The profiles of ``config`` (default: ``GATEWAY_CONFIG_FILE`` read now), checked against
    the settings; ``ConfigError`` naming the first bad entry."""
    if config is None:
        config = load_config_file(settings.gateway_config_file)
    return parse_profiles(
        config,
        models=settings.agent_models or [settings.agent_model],
        tools=known_tools(settings.gateway_tools_file, config),
    )


class Profiles:
    """The book in force, and each profile's context policy (the settings' one, with the
    profile's system prompt and models)."""

    def __init__(
        self,
        book: ProfileBook,
        base: ContextPolicy,
        conversation: ConversationRules | None = None,
    ) -> None:
        self._base = base
        #: GATEWAY_ON_EDIT / GATEWAY_ON_DELETE, for places whose profile sets neither
        self._conversation = conversation or ConversationRules()
        self._book = book
        self._policies: dict[str, ContextPolicy] = {}
        self.apply(book)

    @classmethod
    def watching(cls, watch: ConfigWatch, settings: Settings) -> Profiles:
        """Profiles from the watched file, read again on every reload (a bad file raises
        ``ConfigError`` here at start; on a reload it is refused and these stay)."""
        profiles = cls(
            ProfileBook(),
            ContextPolicy.from_settings(settings),
            ConversationRules(
                on_edit=settings.gateway_on_edit, on_delete=settings.gateway_on_delete
            ),
        )
        watch.subscribe("profiles", lambda config: load_book(settings, config), profiles.apply)
        return profiles

    @property
    def book(self) -> ProfileBook:
        return self._book

    def apply(self, book: ProfileBook) -> None:
        self._policies = {n: self._policy(p) for n, p in book.profiles.items()}
        self._book = book

    def _policy(self, profile: Profile) -> ContextPolicy:
        base = self._base
        return replace(
            base,
            system_prompt=profile.system_prompt or base.system_prompt,
            default_model=profile.model or base.default_model,
            allowed_models=profile.models or base.allowed_models,
        )

    def resolve(self, key: SessionKey) -> Resolved:
        return self._book.resolve(key)

    def profile(self, key: SessionKey) -> Profile:
        """The profile in force at ``key`` (an adapter's ``Places``)."""
        return self._book.resolve(key).profile

    def answers_all(self, key: SessionKey) -> bool | None:
        """The answer policy's input for ``key`` (``AnswerRules.place_answers_all``)."""
        return self._book.answers_all(key)

    def burst_seconds(self, key: SessionKey) -> float | None:
        """The burst window ``key``'s profile sets (``None``: the settings decide)."""
        return self._book.resolve(key).profile.burst_seconds

    def conversation(self, key: SessionKey) -> ConversationRules:
        """What edits and deletions do in ``key`` (the core's door reads it): the place's
        profile's ``on_edit`` / ``on_delete`` over ``GATEWAY_ON_EDIT`` / ``GATEWAY_ON_DELETE``."""
        return self._book.resolve(key).profile.conversation(self._conversation)

    def policy_for(self, profile: Profile) -> ContextPolicy:
        return self._policies.get(profile.name) or self._policy(profile)
