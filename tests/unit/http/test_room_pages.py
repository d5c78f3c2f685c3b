"""Each room's operator page is served by one helper (``room_page``), with the strict page
policy, and loads the shared script (token, ``api``, ``el``, ``notice``) before its own."""

from __future__ import annotations

import re

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from gateway.http.ui import PAGE_HEADERS, ops_routes, room_page

ROOMS = [
    ("gateway.http.ui", "audit"),
    ("gateway.knowledge", "kb"),
    ("gateway.schedules", "schedules"),
    ("gateway.usage", "usage"),
]
SHARED = ("const TOKEN_KEY", "function el(", "async function api(", "function notice(")


@pytest.mark.parametrize(("package", "name"), ROOMS)
def test_a_room_page_and_its_script_are_served_with_the_page_policy(
    package: str, name: str
) -> None:
    client = TestClient(Starlette(routes=[*room_page(package, name), *ops_routes()]))
    page = client.get(f"/ops/{name}")
    script = client.get(f"/ops/{name}/{name}.js")
    assert page.status_code == script.status_code == 200
    for response in (page, script):
        for header, value in PAGE_HEADERS.items():
            assert response.headers[header] == value
    assert script.headers["content-type"].startswith("text/javascript")
    sources = re.findall(r'<script src="([^"]+)"></script>', page.text)
    assert sources == ["/ops/static/common.js", f"/ops/{name}/{name}.js"]
    common = client.get(sources[0])
    assert common.status_code == 200
    # the page's own script uses the shared helpers and does not define them again
    for shared in SHARED:
        assert shared in common.text
        assert shared not in script.text


def test_the_sessions_pages_load_the_shared_script_first() -> None:
    client = TestClient(Starlette(routes=ops_routes()))
    for path in ("/ops", "/ops/sessions/1"):
        sources = re.findall(r'<script src="([^"]+)"></script>', client.get(path).text)
        assert sources == ["/ops/static/common.js", "/ops/static/ops.js"]
    assert client.get("/ops/static/nope.js").status_code == 404
