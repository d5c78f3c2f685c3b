"""The operator pages: static HTML and JS (no external CDN) that call the admin API.

``/ops`` lists sessions (filters, live counts, failed deliveries, dead letters) and
``/ops/sessions/{id}`` shows one transcript with each reply's delivery status, stored target,
model, tokens and feedback. User content is only ever inserted as text (``textContent``)."""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

_ASSETS = {"common.js": "text/javascript", "ops.js": "text/javascript", "ops.css": "text/css"}
# the pages only talk to this origin, with no inline script: the default CSP, nosniff and
# frame-ancestors of gateway.http.guard's middleware cover them
_HEADERS = {"Cache-Control": "no-store"}
#: a room's own page (``room_page``): served with its own strict policy
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


def room_page(package: str, name: str) -> list[Route]:
    """``/ops/NAME`` and ``/ops/NAME/NAME.js``: a room's operator page, ``NAME.html`` and
    ``NAME.js`` from the ``static`` folder of ``package``, read once. The page loads
    ``/ops/static/common.js`` (token, ``api``, ``el``, ``notice``) before its own script and
    calls the admin API (same access policy); the static files are public."""
    static = resources.files(package).joinpath("static")
    page = static.joinpath(f"{name}.html").read_text(encoding="utf-8")
    script = static.joinpath(f"{name}.js").read_text(encoding="utf-8")

    async def page_route(request: Request) -> Response:
        return HTMLResponse(page, headers=PAGE_HEADERS)

    async def script_route(request: Request) -> Response:
        return Response(script, media_type="text/javascript", headers=PAGE_HEADERS)

    return [
        Route(f"/ops/{name}", page_route, methods=["GET"]),
        Route(f"/ops/{name}/{name}.js", script_route, methods=["GET"]),
    ]


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
