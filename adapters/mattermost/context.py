"""Who the gateway is on a Mattermost server, and what every extraction needs to know of it
(kept apart so the extraction modules share it without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class BotIdentity:
    """Who we are on the server (``GET /api/v4/users/me``)."""

    user_id: str
    username: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractContext:
    scope: str
    bot: BotIdentity
