"""What the rooms add to the operator surface and the HTTP app: their admin API routes and
pages (behind the admin API's access policy), their MCP tools on /mcp, and each surface's own
routes (webhooks, the web chat)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway.core.domain import SessionKey
from gateway.http.models_api import models_router
from session_store.errors import SessionNotFound
from session_store.repos.breakers import Breakers

if TYPE_CHECKING:
    from gateway.core.ports import PlatformAdapter
    from gateway.core.settings import Settings
    from gateway.http.admin import OperatorSurface
    from gateway.http.guard import HttpPolicy
    from gateway.knowledge.service import Knowledge
    from gateway.profiles.service import Profiles
    from gateway.schedules.room import ScheduleRoom
    from gateway.usage.service import UsageService
    from session_store.repos.reloads import Reloads
    from session_store.store import Store

#: the admin API's knowledge-base upload (the body is the file)
KB_UPLOAD_PATH = re.compile(r"/api/v1/kb/documents")


class Wired(Protocol):
    """What the routes are built from (``gateway.runtime.gateway.Gateway`` has it all)."""

    settings: Settings
    store: Store
    operator: OperatorSurface
    http_policy: HttpPolicy
    profiles: Profiles
    knowledge: Knowledge
    usage: UsageService
    schedule_room: ScheduleRoom
    adapters: list[PlatformAdapter]
    reloads: Reloads


def extend_operator(gw: Wired) -> None:
    """The MCP tools on /mcp (the one list ``gateway mcp`` serves too), and the threads the
    rooms post into through the operator service."""
    from gateway.runtime.mcp import register_tools

    operator = gw.operator

    def all_tools(server: Any) -> None:
        register_tools(
            server,
            sessions=operator.service,
            knowledge=gw.knowledge,
            profiles=gw.profiles,
            schedules=gw.schedule_room.service,
        )

    operator.register_mcp_tools = all_tools

    async def announce_file(session_key: str, text: str) -> None:
        try:
            await operator.service.append(
                session_key, participant="knowledge", content=text, deliver=True
            )
        except SessionNotFound:
            # a file shared into a thread nobody has written in yet (the web chat's upload
            # into a new thread): its session opens with the note, posted into that thread
            from gateway.core.registry import target_of_place

            key = SessionKey.parse(session_key)
            await operator.service.ops.create_session(
                key, participant="knowledge", reply_target=target_of_place(key)
            )
            await operator.service.append(
                session_key, participant="knowledge", content=text, deliver=True
            )

    # knowledge base: files shared in a thread are announced there when read
    gw.knowledge.announce = announce_file
    # schedules: owners told in their threads
    gw.schedule_room.tell_owners_with(operator.service.append)


def extension_routes(gw: Wired) -> Sequence[Any]:
    """The rooms' routes and pages, then each surface's."""
    policy = gw.operator.policy
    routes: list[Any] = []
    # profiles: /api/v1/profiles, /api/v1/reload
    from gateway.profiles.api import profiles_router

    routes.extend(profiles_router(gw.profiles, policy, gw.reloads).routes)
    # knowledge base: /api/v1/kb, behind the admin API's access policy
    from gateway.knowledge.admin_api import kb_pages, knowledge_router

    routes.extend(knowledge_router(gw.knowledge, policy).routes)
    # its upload takes the file itself as the body (application/octet-stream)
    gw.http_policy.allow_upload(KB_UPLOAD_PATH, gw.settings.gateway_max_file_bytes)
    routes.extend(kb_pages())
    # usage: /api/v1/usage and the /ops/usage page, behind the same access policy
    from gateway.usage.api import usage_pages, usage_router

    routes.extend(usage_router(gw.usage, policy).routes)
    routes.extend(usage_pages())
    # people: export and erasure, /api/v1/people/{id}/export|forget
    from gateway.people.api import people_router

    routes.extend(people_router(gw.store, policy, gw.knowledge.files).routes)
    # the model provider's health for /ops: open breakers, recent errors
    routes.extend(models_router(Breakers(gw.store.db), policy).routes)
    # schedules: /api/v1/schedules, /ops/schedules
    routes.extend(gw.schedule_room.routes(policy))
    for adapter in gw.adapters:
        routes.extend(adapter.http_routes())
    return routes
