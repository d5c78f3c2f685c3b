"""The one answer policy: who the bot answers, decided once for every platform.

Each platform's extract reports ``Facts`` about a message (direct, mentioned, a reply to the
bot, a reply in a thread, from a bot, from the bot itself, the place, the person) and nothing
else; ``decide`` turns them and the ``AnswerRules`` of that platform into a ``Decision``:
answer, answer if the thread is engaged, keep as context, or ignore (not stored as a message,
with the reason kept in the inbox).

The rule, in order (the first that applies wins):

1. the bot's own message: ignored;
2. outside the allowed places, or from someone outside the allowed people: ignored;
3. from another bot (unless ``GATEWAY_ANSWER_BOTS``): context;
4. posted by the platform itself (a channel post copied into its discussion group): context;
5. a command addressed to the bot: answered;
6. nothing in it (a bare service-like message): context;
7. a direct message, a mention, a reply to the bot, or any message in a place that answers
   everything: answered;
8. a reply inside a thread: answered if the thread is engaged (the bot was addressed there,
   so something of it is visible there; the store decides it atomically with the session
   row), unless mentions are required;
9. anything else: context.

One vocabulary of settings. A *place* is written as in ``[places]`` of the config file,
``platform:scope:chat[:thread]``, any part ``*``; a *person* as ``platform:id``. A list
restricts only the platforms it names: ``GATEWAY_ALLOWED_PLACES=slack:*:C1`` leaves Telegram
open. Every platform's older setting is a shorthand for the same list:

=================================  ======================================================
setting                            in the one vocabulary
=================================  ======================================================
``GATEWAY_ALLOWED_PLACES``         allowed places (patterns)
``TELEGRAM_ALLOWED_CHATS=ID``      allowed place ``telegram:*:ID``
``SLACK_ALLOWED_CHANNELS=ID``      allowed place ``slack:*:ID``
``MATTERMOST_ALLOWED_CHANNELS=ID`` allowed place ``mattermost:*:ID``
``GATEWAY_ALLOWED_PEOPLE``         allowed people (``platform:id``)
``TELEGRAM_ALLOWED_USERS=ID``      allowed person ``telegram:ID`` (likewise ``SLACK_`` and
                                   ``MATTERMOST_ALLOWED_USERS``)
``GATEWAY_ANSWER_ALL_PLACES``      places where every message is answered (patterns)
``TELEGRAM_ANSWER_ALL_CHATS=ID``   answer-all place ``telegram:*:ID`` (likewise
                                   ``SLACK_`` / ``MATTERMOST_ANSWER_ALL_CHANNELS``)
``GATEWAY_REQUIRE_MENTION``        require mentions for thread follow-ups, everywhere
``SLACK_REQUIRE_MENTION``          the same, on Slack only (likewise ``MATTERMOST_``)
``GATEWAY_ANSWER_BOTS``            answer other bots (never the bot itself)
=================================  ======================================================

A place's profile (its ``answer = "mentions" | "all"``) is one more input, resolved for the
place: ``AnswerRules.place_answers_all`` (``True`` all, ``False`` mentions, ``None`` not set
there), or ``decide(..., answer_all=)`` from a caller that resolved it itself. Where neither
says, the answer-all places decide.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gateway.core.domain import Facts, SessionKey, Trigger, escape_part, unescape_part
from gateway.core.plugins import Shorthand, SurfacePlugin, SurfaceSettings
from gateway.core.registry import find_plugin
from gateway.core.settings import Settings

__all__ = [
    "Action",
    "AnswerRules",
    "Decision",
    "Facts",
    "PlaceAnswerRule",
    "PlacePattern",
    "Shorthand",
    "answer_rules_of",
    "decide",
    "rules_for",
    "surface_rules",
]


#: a place's own answer rule: ``True`` every message, ``False`` mentions, ``None`` not set
PlaceAnswerRule = Callable[[SessionKey], bool | None]


class Action(enum.Enum):
    ANSWER = "answer"
    #: answered if the thread is engaged; the store decides it with the session row
    IF_ENGAGED = "if_engaged"
    CONTEXT = "context"
    #: not stored as a message; the inbox keeps the reason
    IGNORE = "ignore"


_TRIGGERS = {
    Action.ANSWER: Trigger.ALWAYS,
    Action.IF_ENGAGED: Trigger.IF_FOLLOWING,
    Action.CONTEXT: Trigger.NEVER,
    Action.IGNORE: Trigger.NEVER,
}


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    #: why, in words (an ignored message's reason in the inbox)
    reason: str

    @property
    def trigger(self) -> Trigger:
        """The stored message's ``Trigger`` (an ignored message has none: ``NEVER``)."""
        return _TRIGGERS[self.action]

    @property
    def ignored(self) -> bool:
        return self.action is Action.IGNORE


@dataclass(frozen=True, slots=True)
class PlacePattern:
    """``platform:scope:chat[:thread]``, each part a value or ``*``; without a thread it
    matches the chat's every thread.

    Each part is written as a session key writes its chat (``escape_part``): ``:`` as ``%3A``
    and ``%`` as ``%25`` (a Matrix room ``!abc:example.org`` is ``!abc%3Aexample.org``, a scope
    ``host:8065`` is ``host%3A8065``). The fields hold the ids themselves, decoded; a part
    that is exactly ``*`` is the wildcard."""

    platform: str
    scope: str
    chat: str
    thread: str | None = None

    @classmethod
    def parse(cls, text: str) -> PlacePattern:
        parts = text.strip().split(":")
        if len(parts) not in (3, 4) or not all(parts):
            raise ValueError(f"place {text!r} is not platform:scope:chat[:thread]")
        return cls(*(unescape_part(part) for part in parts))

    @classmethod
    def chat_of(cls, platform: str, chat: str) -> PlacePattern:
        """A platform's chat in every scope: what an older per-platform list names."""
        return cls(platform, "*", chat.strip())

    def matches(self, key: SessionKey) -> bool:
        pairs = [(self.platform, key.platform), (self.scope, key.scope), (self.chat, key.chat_id)]
        if self.thread is not None:
            pairs.append((self.thread, key.thread_id or ""))
        return all(want in ("*", have) for want, have in pairs)

    def __str__(self) -> str:
        parts = [self.platform, self.scope, self.chat]
        written = parts if self.thread is None else [*parts, self.thread]
        return ":".join(escape_part(part) for part in written)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerRules:
    """The settings of one platform in the one vocabulary (see the module docstring)."""

    #: empty: every place
    allowed_places: tuple[PlacePattern, ...] = ()
    #: person ids on this platform; empty: everyone
    allowed_people: frozenset[str] = frozenset()
    answer_all_places: tuple[PlacePattern, ...] = ()
    require_mention: bool = False
    answer_bots: bool = False
    #: how an ignored message's reason names the place, the bot's own message and the
    #: settings that refused it
    chat_word: str = "chat"
    own_word: str = "message"
    places_named: str = "GATEWAY_ALLOWED_PLACES"
    people_named: str = "GATEWAY_ALLOWED_PEOPLE"
    #: a place's own answer rule (its profile's ``answer``): ``True`` every message, ``False``
    #: mentions only, ``None`` not set there
    place_answers_all: PlaceAnswerRule | None = None

    def answers_all(self, place: SessionKey) -> bool:
        own = None if self.place_answers_all is None else self.place_answers_all(place)
        if own is not None:
            return own
        return any(p.matches(place) for p in self.answer_all_places)

    def refuses(self, facts: Facts) -> str | None:
        """Why the place or the person is outside the allow-lists, else ``None``."""
        if self.allowed_places and not any(p.matches(facts.place) for p in self.allowed_places):
            return f"{self.chat_word} {facts.place.chat_id} is not in {self.places_named}"
        person = facts.person
        if self.allowed_people and person is not None and person not in self.allowed_people:
            return f"user {person} is not in {self.people_named}"
        return None


def decide(facts: Facts, rules: AnswerRules, *, answer_all: bool | None = None) -> Decision:
    """Answer, answer if engaged, keep as context, or ignore: the rule of the module
    docstring. ``answer_all``: the place's own answer rule (a profile's ``answer = "all"``),
    resolved by the caller; ``None`` leaves it to ``rules.answer_all_places``."""
    if facts.from_self:
        return Decision(Action.IGNORE, f"own {rules.own_word}")
    refused = rules.refuses(facts)
    if refused is not None:
        return Decision(Action.IGNORE, refused)
    if facts.from_bot and not rules.answer_bots:
        return Decision(Action.CONTEXT, "from a bot")
    if facts.automatic:
        return Decision(Action.CONTEXT, "posted by the platform")
    if facts.command:
        return Decision(Action.ANSWER, "command")
    if not facts.content:
        return Decision(Action.CONTEXT, "no content")
    addressed = (
        ("direct message", facts.direct),
        ("mentioned", facts.mentioned),
        ("reply to the bot", facts.reply_to_bot),
    )
    for reason, present in addressed:
        if present:
            return Decision(Action.ANSWER, reason)
    if rules.answers_all(facts.place) if answer_all is None else answer_all:
        return Decision(Action.ANSWER, "every message is answered here")
    if facts.thread_reply and not rules.require_mention:
        return Decision(Action.IF_ENGAGED, "thread follow-up")
    return Decision(Action.CONTEXT, "not addressed")


# --- the settings, in one vocabulary ------------------------------------------------------


def _concerning(platform: str, patterns: Iterable[PlacePattern]) -> tuple[PlacePattern, ...]:
    return tuple(p for p in patterns if p.platform in ("*", platform))


def _named(*pairs: tuple[str, bool]) -> str:
    return " or ".join(name for name, used in pairs if used and name)


@dataclass(frozen=True, slots=True)
class _NoCoreSettings:
    """The core's answer settings when only a platform's own are given: none."""

    gateway_allowed_places: tuple[str, ...] = ()
    gateway_allowed_people: tuple[str, ...] = ()
    gateway_answer_all_places: tuple[str, ...] = ()
    gateway_require_mention: bool = False
    gateway_answer_bots: bool = False


_NO_CORE = _NoCoreSettings()


def rules_for(
    settings: Settings | None,
    shorthand: Shorthand,
    *,
    answer_bots: bool | None = None,
    place_answers_all: PlaceAnswerRule | None = None,
) -> AnswerRules:
    """The ``AnswerRules`` of ``shorthand.platform``: the ``GATEWAY_*`` lists that concern it
    (none without core ``settings``) and its own shorthand settings, together;
    ``answer_bots`` overrides ``GATEWAY_ANSWER_BOTS``; ``place_answers_all`` is the places'
    profiles' answer rule (``AdapterContext.place_answers_all``). A bad place raises
    ``ValueError``."""
    platform = shorthand.platform
    core = settings if settings is not None else _NO_CORE
    places = _concerning(platform, map(PlacePattern.parse, core.gateway_allowed_places))
    chats = tuple(PlacePattern.chat_of(platform, c) for c in shorthand.allowed_chats)
    people = {
        p.split(":", 1)[1]
        for p in core.gateway_allowed_people
        if p.split(":", 1)[0] in ("*", platform)
    }
    users = {u.strip() for u in shorthand.allowed_users}
    answer_all = _concerning(platform, map(PlacePattern.parse, core.gateway_answer_all_places))
    return AnswerRules(
        allowed_places=places + chats,
        allowed_people=frozenset(people | users),
        answer_all_places=answer_all
        + tuple(PlacePattern.chat_of(platform, c) for c in shorthand.answer_all_chats),
        require_mention=core.gateway_require_mention or shorthand.require_mention,
        answer_bots=core.gateway_answer_bots if answer_bots is None else answer_bots,
        place_answers_all=place_answers_all,
        chat_word=shorthand.chat_word,
        own_word=shorthand.own_word,
        places_named=_named(
            ("GATEWAY_ALLOWED_PLACES", bool(places)), (shorthand.allowed_chats_name, bool(chats))
        ),
        people_named=_named(
            ("GATEWAY_ALLOWED_PEOPLE", bool(people)), (shorthand.allowed_users_name, bool(users))
        ),
    )


def surface_rules(
    plugin: SurfacePlugin[Any],
    settings: SurfaceSettings,
    core: Settings | None,
    *,
    answer_bots: bool | None = None,
    place_answers_all: PlaceAnswerRule | None = None,
) -> AnswerRules:
    """The rules a surface plugin declares (``SurfacePlugin.answer_settings`` over its
    ``settings``), with the core's ``GATEWAY_*`` ones unless the plugin opts out
    (``core_answer_settings``): what the core's ingress decides that surface's messages by."""
    return rules_for(
        core if plugin.core_answer_settings else None,
        plugin.answer_settings(settings),
        answer_bots=answer_bots,
        place_answers_all=place_answers_all,
    )


def answer_rules_of(
    platform: str, settings: Settings, *, place_answers_all: PlaceAnswerRule | None = None
) -> AnswerRules:
    """The rules the core's ingress decides ``platform``'s messages by: what its plugin
    declares over its settings, with the ``GATEWAY_*`` ones and the places' profiles; a
    surface without a plugin (``GATEWAY_ADAPTERS``) gets the ``GATEWAY_*`` ones alone."""
    plugin = find_plugin(platform)
    if plugin is None:
        return rules_for(
            settings, Shorthand(platform=platform), place_answers_all=place_answers_all
        )
    return surface_rules(
        plugin,
        settings.surface(plugin.settings_class),
        settings,
        place_answers_all=place_answers_all,
    )
