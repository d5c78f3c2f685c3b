"""Microsoft Teams: Bot Framework activities in at ``POST /teams/messages``, replies out
through the Bot Connector, on the Microsoft 365 Agents SDK's activity models and connector
client (``microsoft-agents-activity``, ``microsoft-agents-hosting-core``).

A channel post that mentions the bot is a thread: ``SessionKey("teams", tenant, channel,
root activity id)``, answered in that post's reply chain (``19:…@thread.tacv2;messageid=…``);
a reply in the chain is the same session. 1:1 and group chats are one session each, answered
in the chat. The facts are in ``shared/spec/platforms.md`` §9.

Every request's bearer JWT is checked (``auth.py``): the signature against the keys of the
OpenID metadata document (``TEAMS_OPENID_METADATA_URL``), the issuer, the audience (the app
id), the expiry (5 minutes of skew) and the ``serviceUrl`` claim against the activity's; a
failure is a 401 and nothing is stored. Outbound calls carry a client-credentials token from
``TEAMS_TOKEN_URL`` (``tokens.py``).

Conversation ids contain ``:`` (``19:…``, ``a:…``): a session key holds the id as Teams
writes it, and the key's text form (``SessionKey.__str__``, places in settings) writes that
``:`` as ``%3A``, as it does for every surface.

Deliberately not handled: files shared in Teams (they need Graph permissions), proactive
first posts into a place nobody wrote in (``place_target`` uses the last service URL seen),
message extensions and task modules, and the Teams streaming protocol (``streaminfo``
entities; previews are plain messages updated in place, as on the other surfaces).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.core.plugins import lazy_attributes

if TYPE_CHECKING:
    from adapters.teams.adapter import TeamsAdapter

__all__ = ["TeamsAdapter"]

__getattr__ = lazy_attributes(__name__, {"TeamsAdapter": "adapters.teams.adapter"})
