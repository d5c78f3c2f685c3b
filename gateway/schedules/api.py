"""Schedules in the admin API (``/api/v1/schedules``) and as MCP tools (``schedule_create``,
``schedule_list``, ``schedule_delete``), behind the same access policy as the rest: an
operator's, so a delete removes any schedule."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.routing import Route

from gateway.core.errors import GatewayError
from gateway.http import params
from gateway.http.admin import API_PREFIX, MAX_ID, AccessPolicy, admin_api_router
from gateway.http.ui import room_page
from gateway.schedules.places import parse_place
from gateway.schedules.service import OPERATOR, ScheduleService
from gateway.schedules.shape import ScheduleMade, ScheduleOut

if TYPE_CHECKING:  # the MCP SDK is imported when /mcp is first asked (gateway.http.mcp_endpoint)
    from mcp.server.mcpserver import MCPServer

SCHEDULE_TOOLS = ("schedule_create", "schedule_list", "schedule_delete")
Place = Annotated[
    str,
    Field(
        min_length=5,
        max_length=600,
        description="platform:scope:chat[:thread], exact: slack:T0123:C0456:1700000000.000100",
    ),
]


class ScheduleIn(BaseModel):
    """A schedule: exactly one of ``at`` and ``cron``."""

    model_config = ConfigDict(extra="forbid")
    place: Place
    prompt: str = Field(min_length=1, max_length=20_000)
    at: str | None = Field(
        default=None, max_length=64, description="one-shot: YYYY-MM-DD HH:MM in tz, or ISO 8601"
    )
    cron: str | None = Field(default=None, max_length=200, description='"0 9 * * 1-5"')
    tz: str = Field(default="UTC", max_length=64, description="IANA time zone")
    name: str | None = Field(default=None, max_length=200)
    owner: str | None = Field(
        default=None, max_length=300, description="platform:scope:user_id (default: operator)"
    )
    strict: bool = Field(
        default=False,
        description="refuse a place the gateway has never seen (else: made, with a warning)",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> ScheduleIn:
        if (self.at is None) == (self.cron is None):
            raise ValueError("give exactly one of at and cron")
        return self


def schedules_router(service: ScheduleService, policy: AccessPolicy) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/schedules", tag="schedules")

    @router.get("", response_model=list[ScheduleOut], summary="Schedules")
    async def listing(
        place: Annotated[
            str | None, Query(min_length=5, max_length=600, pattern=params.SCHEDULE_PLACE)
        ] = None,
    ) -> list[ScheduleOut]:
        key = None if place is None else parse_place(place)
        return [ScheduleOut.of(s) for s in await service.listing(place=key)]

    @router.post(
        "",
        response_model=ScheduleMade,
        status_code=201,
        summary="Create a schedule",
        description="A platform no surface serves is refused (422); a place the gateway has "
        "never seen is made with a warning in `warnings`, or refused (422) with `strict`.",
    )
    async def create(body: ScheduleIn) -> ScheduleMade:
        made, warnings = await service.create_checked(
            body.place,
            prompt=body.prompt,
            owner=body.owner or OPERATOR,
            at=body.at,
            cron=body.cron,
            tz=body.tz,
            name=body.name,
            strict=body.strict,
        )
        return ScheduleMade.made(made, warnings)

    @router.get("/{schedule_id}", response_model=ScheduleOut)
    async def one(schedule_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> ScheduleOut:
        return ScheduleOut.of(await service.get(schedule_id))

    @router.delete("/{schedule_id}", status_code=204)
    async def delete(schedule_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> None:
        await service.cancel(schedule_id)

    @router.post("/{schedule_id}/run", summary="Fire a schedule now")
    async def run(schedule_id: Annotated[int, Path(ge=1, le=MAX_ID)]) -> dict[str, Any]:
        fired = await service.run(schedule_id)
        return {"schedule_id": schedule_id, "session_id": fired.session_id, "seq_no": fired.seq_no}

    return router


def schedule_pages() -> list[Route]:
    """``/ops/schedules``: each schedule with its next and last firing and its outcome."""
    return room_page("gateway.schedules", "schedules")


@contextlib.contextmanager
def _as_tool_error() -> Iterator[None]:
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except GatewayError as exc:
        raise ToolError(str(exc)) from exc


def add_schedule_tools(server: MCPServer, service: ScheduleService) -> None:
    @server.tool()
    async def schedule_create(
        place: Place,
        prompt: Annotated[str, Field(min_length=1, max_length=20_000)],
        at: Annotated[str | None, Field(max_length=64)] = None,
        cron: Annotated[str | None, Field(max_length=200)] = None,
        tz: Annotated[str, Field(max_length=64)] = "UTC",
        name: Annotated[str | None, Field(max_length=200)] = None,
        owner: Annotated[str | None, Field(max_length=300)] = None,
        strict: bool = False,
    ) -> dict[str, Any]:
        """Ask the assistant PROMPT in PLACE at a time (at: "2026-12-04 09:00" in tz) or on
        a cron expression ("0 9 * * 1-5" in tz); its answer is posted in that place. A place
        the gateway has never seen is made with a warning (refused with strict)."""
        with _as_tool_error():
            made, warnings = await service.create_checked(
                place,
                prompt=prompt,
                owner=owner or OPERATOR,
                at=at,
                cron=cron,
                tz=tz,
                name=name,
                strict=strict,
            )
        return ScheduleMade.made(made, warnings).model_dump(mode="json")

    @server.tool()
    async def schedule_list(place: Place | None = None) -> dict[str, Any]:
        """The schedules (of one place, or all) with their next and last firing."""
        with _as_tool_error():
            found = await service.listing(place=None if place is None else parse_place(place))
        return {"schedules": [ScheduleOut.of(s).model_dump(mode="json") for s in found]}

    @server.tool()
    async def schedule_delete(
        schedule_id: Annotated[int, Field(ge=1, lt=2**63)],
    ) -> dict[str, Any]:
        """Remove a schedule: it fires no more."""
        with _as_tool_error():
            removed = await service.cancel(schedule_id)
        return {"deleted": removed.id}
