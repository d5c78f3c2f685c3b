"""``GET /api/v1/usage`` (behind the admin API's access policy) and the ``/ops/usage``
operator page: spend per day as a chart, top people, places and models, and the budgets."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from gateway.core.errors import RequestError
from gateway.http import params
from gateway.http.admin import API_PREFIX, AccessPolicy, admin_api_router
from gateway.knowledge.admin_api import PAGE_HEADERS
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
    """``/ops/usage``: the page calls the API above (same access policy)."""
    from importlib import resources

    static = resources.files("gateway.usage").joinpath("static")
    page = static.joinpath("usage.html").read_text(encoding="utf-8")
    script = static.joinpath("usage.js").read_text(encoding="utf-8")

    async def usage_page(request: Request) -> Response:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    async def usage_script(request: Request) -> Response:
        return Response(script, media_type="text/javascript", headers=PAGE_HEADERS)

    return [
        Route("/ops/usage", usage_page, methods=["GET"]),
        Route("/ops/usage/usage.js", usage_script, methods=["GET"]),
    ]
