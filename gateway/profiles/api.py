"""Profiles for operators: ``GET /api/v1/profiles``, ``GET /api/v1/profiles/resolve?place=``,
``POST /api/v1/reload`` (what ``gateway reload`` calls) and the MCP tool ``profile_show``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field, StringConstraints

from gateway.core.domain import SessionKey
from gateway.core.errors import RequestError
from gateway.http import params
from gateway.http.admin import API_PREFIX, AccessPolicy, admin_api_router
from gateway.profiles.model import place_key, resolved_json
from gateway.profiles.reload import request_reload
from gateway.profiles.service import Profiles
from session_store.repos.reloads import Reloads

if TYPE_CHECKING:  # the MCP SDK is imported when /mcp is first asked (gateway.http.mcp_endpoint)
    from mcp.server.mcpserver import MCPServer

__all__ = ["add_profile_tools", "profiles_router"]

PlaceText = Annotated[
    str,
    Query(
        min_length=5,
        max_length=600,
        pattern=params.PLACE,
        description="platform:scope:chat[:thread], e.g. slack:T0123:C0456",
    ),
]


def _resolve(profiles: Profiles, place: str) -> dict[str, Any]:
    return resolved_json(place, profiles.resolve(place_key(place)))


def profiles_router(profiles: Profiles, policy: AccessPolicy, reloads: Reloads) -> APIRouter:
    router = admin_api_router(policy, prefix=API_PREFIX, tag="profiles")

    @router.get("/profiles", summary="Profiles and places")
    async def listing() -> dict[str, Any]:
        """Every profile of the config file, and the ``[places]`` entries, most specific
        first (the order they are tried in)."""
        book = profiles.book
        return {
            "profiles": [p.describe() for p in book.profiles.values()],
            "places": [{"place": p.text, "profile": p.profile} for p in book.places],
        }

    @router.get("/profiles/resolve", summary="The profile in force in a place")
    async def resolve(place: PlaceText) -> dict[str, Any]:
        """The effective profile of ``place`` and the ``[places]`` entry that chose it
        (``null``: none matched, the built-in default)."""
        try:
            return _resolve(profiles, place)
        except ValueError as exc:
            raise RequestError(str(exc), title="Invalid place") from exc

    @router.get("/profiles/sessions", summary="The profile of each session's place")
    async def of_sessions(
        key: Annotated[
            list[Annotated[str, StringConstraints(max_length=160, pattern=params.ASCII_KEY)]],
            Query(max_length=50, description="session keys"),
        ],
    ) -> dict[str, dict[str, str]]:
        """``{"profiles": {session key: profile name}}`` for session keys written as
        ``platform:scope:chat:thread`` (``-`` for no thread): the operator pages' column."""
        found: dict[str, str] = {}
        for text in key:
            try:
                found[text] = profiles.resolve(SessionKey.parse(text)).profile.name
            except ValueError as exc:
                raise RequestError(str(exc), title="Invalid session key") from exc
        return {"profiles": found}

    @router.post("/reload", summary="Every replica reads its config file again")
    async def reload_config() -> dict[str, object]:
        """Every live replica reads its config file again (profiles, places and every section
        that subscribes) and reports the file and its SHA-256; one that cannot keeps what is
        in force and says why (`reloaded` is true only when every replica reloaded)."""
        return (await request_reload(reloads, path=None)).to_json()

    return router


def add_profile_tools(server: MCPServer, profiles: Profiles) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    @server.tool()
    async def profile_show(
        place: Annotated[str, Field(min_length=5, max_length=600)],
    ) -> dict[str, Any]:
        """The profile in force in a place (``platform:scope:chat[:thread]``): prompt,
        models, tools, knowledge, answer rule, and the ``[places]`` entry that chose it."""
        try:
            return _resolve(profiles, place)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
