"""Accounts and places typed by an operator, checked against what the gateway knows.

A platform is known when a surface for it is installed (the plugin registry), runs in this
gateway, or a message came from it once (a ``GATEWAY_ADAPTERS`` surface). An account or a
place on any other platform is refused, naming it (``telegarm:bot:1``: a typo would otherwise
merge a person with nobody, or fire a schedule into nowhere). A place on a known platform that
the gateway has never seen is only warned about: a schedule may be made before the first
message there; ``strict`` refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Protocol

from gateway.core.domain import SessionKey
from gateway.core.errors import RequestError

__all__ = ["UNKNOWN_PLACE", "KnownPlaces", "PlacesSeen", "UnknownPlatform"]

#: the title of a strict refusal of a place never seen
UNKNOWN_PLACE = "Unknown place"


class PlacesSeen(Protocol):
    """Where the gateway has had sessions (``session_store.repos.places.PlacesSeen``)."""

    async def platform_seen(self, platform: str) -> bool: ...

    async def place_seen(self, key: SessionKey) -> tuple[bool, bool]: ...


class UnknownPlatform(RequestError):
    """An account or place names a platform no surface serves."""


class KnownPlaces:
    def __init__(self, platforms: Callable[[], Collection[str]], seen: PlacesSeen) -> None:
        #: the platforms of the installed and running surfaces
        self._platforms = platforms
        self._seen = seen

    async def check_platform(self, platform: str, *, what: str) -> None:
        """``UnknownPlatform`` (422) naming ``what`` (the account or place as typed) unless
        ``platform`` is known."""
        known = self._platforms()
        if platform in known or await self._seen.platform_seen(platform):
            return
        names = ", ".join(sorted(known)) or "none"
        raise UnknownPlatform(
            f"{what}: there is no platform {platform!r} (known platforms: {names})",
            title="Unknown platform",
        )

    async def check_account(self, account: str) -> None:
        """An account ``platform:scope:user_id`` on a known platform."""
        await self.check_platform(account.split(":", 1)[0], what=account)

    async def check_place(self, key: SessionKey, text: str, *, strict: bool = False) -> list[str]:
        """The warnings about a place (``text`` as typed): its platform must be known
        (``UnknownPlatform`` otherwise); a chat or thread never seen is a warning, or with
        ``strict`` a ``RequestError`` (422)."""
        await self.check_platform(key.platform, what=text)
        chat_seen, thread_seen = await self._seen.place_seen(key)
        warnings: list[str] = []
        if not chat_seen:
            chat = key.chat_text
            warnings.append(
                f"the gateway has never seen the place {chat}: check its scope and chat id "
                "(a message there, or a session listed by `gateway sessions list`, shows them)"
            )
        elif not thread_seen:
            warnings.append(f"the gateway has never seen thread {key.thread_id} in {text}")
        if warnings and strict:
            raise RequestError(f"{text}: {warnings[0]} (refused: strict)", title=UNKNOWN_PLACE)
        return warnings
