"""``GET /api/v1/usage`` (behind the admin API's access policy) and the ``/ops/usage``
operator page: spend per day as a chart, top people, places and models, and the budgets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from starlette.routing import Route

from gateway.core.errors import RequestError
from gateway.http import params
from gateway.http.admin import API_PREFIX, AccessPolicy, admin_api_router
from gateway.http.ui import room_page
from gateway.usage.report import BadRange, build_report
from gateway.usage.service import UsageService

Day = Annotated[params.Day | None, Query(description="YYYY-MM-DD (UTC)")]


def usage_router(usage: UsageService, policy: AccessPolicy) -> APIRouter:
    router = admin_api_router(policy, prefix=f"{API_PREFIX}/usage", tag="usage")

    @router.get("", summary="Spend and tokens from the usage ledger, with the budgets")
    async def report(
        by: Literal["person", "place", "model", "day"] = "person",
        since: Day = None,
        until: Day = None,
    ) -> dict[str, Any]:
        try:
            found = await build_report(
                usage.store,
                usage.config.budgets,
                by=by,
                since=None if since is None else since.isoformat(),
                until=None if until is None else until.isoformat(),
            )
        except BadRange as exc:
            raise RequestError(str(exc), title="Invalid range") from exc
        return found.as_json()

    return router


def usage_pages() -> list[Route]:
    """``/ops/usage``: spend per day, top people, places and models, and the budgets."""
    return room_page("gateway.usage", "usage")
