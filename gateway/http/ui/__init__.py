"""The operator pages: static HTML and JS (no external CDN) that call the admin API.

``/ops`` lists sessions (filters, live counts, failed deliveries, dead letters) and
``/ops/sessions/{id}`` shows one transcript with each reply's delivery status, stored target,
model, tokens and feedback. User content is only ever inserted as text (``textContent``)."""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

_ASSETS = {"ops.js": "text/javascript", "ops.css": "text/css"}
# the pages only talk to this origin, with no inline script: the default CSP, nosniff and
# frame-ancestors of gateway.http.guard's middleware cover them
_HEADERS = {"Cache-Control": "no-store"}


def ops_routes() -> list[Route]:
    static = resources.files("gateway.http.ui").joinpath("static")
    files = {
        name: static.joinpath(name).read_text(encoding="utf-8")
        for name in ("sessions.html", "session.html", *_ASSETS)
    }

    async def sessions_page(request: Request) -> Response:
        return HTMLResponse(files["sessions.html"], headers=_HEADERS)

    async def session_page(request: Request) -> Response:
        return HTMLResponse(files["session.html"], headers=_HEADERS)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _ASSETS:
            return PlainTextResponse("not found", status_code=404)
        return Response(files[name], media_type=_ASSETS[name], headers=_HEADERS)

    return [
        Route("/ops", sessions_page, methods=["GET"]),
        Route("/ops/sessions/{session}", session_page, methods=["GET"]),
        Route("/ops/static/{name}", asset, methods=["GET"]),
    ]
