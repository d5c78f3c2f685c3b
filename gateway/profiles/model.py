"""A profile, the places given to profiles, and the resolution of a place to its profile.

Pure values: nothing here reads a file or the database. A ``ProfileBook`` is built once per
(re)load of the config file (``gateway.profiles.parse``) and then only read; its resolution
of a session key is memoised (bounded), so a message or a turn costs a dict lookup.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.core.domain import SessionKey
from gateway.core.profile import AnswerRule, Profile
from gateway.inbound.policy import PlacePattern

__all__ = [
    "DEFAULT",
    "AnswerRule",
    "Place",
    "Profile",
    "ProfileBook",
    "Resolved",
    "place_key",
    "resolved_json",
]

#: the built-in profile's name (the settings as they are), unless the file defines one
DEFAULT = "default"


@dataclass(frozen=True, slots=True)
class Place:
    """One ``[places]`` entry: ``"slack:*:C0SUPPORT" = "support"``."""

    #: the entry as written (``"*"`` alone is the default)
    text: str
    #: ``None`` for ``"*"``: every place
    pattern: PlacePattern | None
    profile: str
    #: its order in the file (earlier wins a tie)
    order: int = 0

    @property
    def specificity(self) -> tuple[int, ...]:
        """Greater wins: a thread over its chat, a chat over a wildcard, ``"*"`` last."""
        p = self.pattern
        if p is None:
            return (-1,)
        fixed = [p.thread not in (None, "*"), p.chat != "*", p.scope != "*", p.platform != "*"]
        return (*(int(x) for x in fixed), int(p.thread is not None))

    def matches(self, key: SessionKey) -> bool:
        return self.pattern is None or self.pattern.matches(key)

    def matches_chat(self, platform: str, scope: str, chat: str) -> bool:
        """Whether it matches some thread of this chat (its thread part aside)."""
        p = self.pattern
        if p is None:
            return True
        return p.platform in ("*", platform) and p.scope in ("*", scope) and p.chat in ("*", chat)

    def matches_thread(self, thread: str) -> bool:
        """For an entry that matches the chat: whether it matches this thread too."""
        wanted = None if self.pattern is None else self.pattern.thread
        return wanted is None or wanted == "*" or wanted == thread


@dataclass(frozen=True, slots=True)
class Resolved:
    """The profile in force in a place, and the ``[places]`` entry that chose it (``None``:
    no entry matched, the built-in default)."""

    profile: Profile
    entry: Place | None


#: a chat's candidate entries, most specific first, each with its resolution
_Candidates = tuple[tuple[Place, Resolved], ...]


@dataclass(eq=False)
class ProfileBook:
    """Every profile and place of one read of the config file."""

    profiles: Mapping[str, Profile] = field(
        default_factory=lambda: {DEFAULT: Profile(name=DEFAULT)}
    )
    places: Sequence[Place] = ()
    #: the entries matching each chat seen, by (platform, scope, chat): a new thread of a
    #: known chat is resolved without walking every entry (bounded: cleared when full)
    _memo: dict[tuple[str, str, str], _Candidates] = field(default_factory=dict, repr=False)
    memo_size: int = 10_000
    _default: Resolved = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # most specific first; a tie keeps the file's order
        self.places = sorted(self.places, key=lambda p: (tuple(-x for x in p.specificity), p.order))
        self._default = Resolved(self.default, None)

    @property
    def default(self) -> Profile:
        return self.profiles.get(DEFAULT) or Profile(name=DEFAULT)

    def resolve(self, key: SessionKey) -> Resolved:
        """The most specific entry matching ``key`` (from memory: a dict lookup and the
        chat's few candidate entries)."""
        chat = (key.platform, key.scope, key.chat_id)
        candidates = self._memo.get(chat)
        if candidates is None:
            candidates = tuple(
                (p, Resolved(self.profiles[p.profile], p))
                for p in self.places
                if p.matches_chat(*chat)
            )
            if len(self._memo) >= self.memo_size:
                self._memo.clear()
            self._memo[chat] = candidates
        thread = key.thread_id or ""
        for place, resolved in candidates:
            if place.matches_thread(thread):
                return resolved
        return self._default

    def answers_all(self, key: SessionKey) -> bool | None:
        return self.resolve(key).profile.answers_all


def place_key(text: str) -> SessionKey:
    """A place as written in ``[places]`` with no ``*``: the session key it stands for (each
    part escaped as in a pattern: ``:`` as ``%3A``, ``%`` as ``%25``)."""
    parts = text.strip().split(":")
    if len(parts) not in (3, 4) or not all(parts) or "*" in parts:
        raise ValueError(f"place {text!r} is not platform:scope:chat[:thread] (no *)")
    pattern = PlacePattern.parse(text)
    return SessionKey(
        platform=pattern.platform,
        scope=pattern.scope,
        chat_id=pattern.chat,
        thread_id=pattern.thread,
    )


def resolved_json(place: str, resolved: Resolved) -> dict[str, Any]:
    entry = resolved.entry
    return {
        "place": place,
        "profile": resolved.profile.describe(),
        "entry": None if entry is None else {"place": entry.text, "profile": entry.profile},
    }
