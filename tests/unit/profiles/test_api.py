"""The admin API's profiles routes, behind the admin token, answering from memory."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI

from gateway.http.admin import AccessPolicy, install_problem_handlers
from gateway.profiles.api import profiles_router
from gateway.profiles.service import Profiles
from gateway.turns.context import ContextPolicy
from session_store.repos.reloads import Reloads
from session_store.store import Store
from tests.unit.profiles.test_resolution import book

TOKEN = "t" * 32


@pytest.fixture
async def client(store: Store) -> httpx.AsyncClient:
    app = FastAPI()
    install_problem_handlers(app)
    profiles = Profiles(book(), ContextPolicy())
    app.include_router(profiles_router(profiles, AccessPolicy(TOKEN), Reloads(store.db)))
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1234))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", headers=headers)


async def test_profiles_places_and_resolution(client: httpx.AsyncClient) -> None:
    async with client:
        listing = (await client.get("/api/v1/profiles")).json()
        assert [p["name"] for p in listing["profiles"]] == [
            "default",
            "support",
            "eng",
            "private",
            "topic",
        ]
        # most specific first: the order they are tried in
        assert listing["places"][0] == {"place": "telegram:*:-100123:77", "profile": "topic"}
        assert listing["places"][-1] == {"place": "*", "profile": "default"}
        found = (await client.get("/api/v1/profiles/resolve?place=slack:T1:C0SUPPORT")).json()
        assert found["profile"]["name"] == "support" and found["profile"]["answer"] == "all"
        assert found["entry"] == {"place": "slack:*:C0SUPPORT", "profile": "support"}
        keys = "key=slack:T1:C0SUPPORT:-&key=telegram:bot:-100123:77"
        assert (await client.get(f"/api/v1/profiles/sessions?{keys}")).json() == {
            "profiles": {"slack:T1:C0SUPPORT:-": "support", "telegram:bot:-100123:77": "topic"}
        }


async def test_bad_input_is_a_4xx_and_a_refused_reload_says_why(
    client: httpx.AsyncClient,
) -> None:
    async with client:
        for path in (
            "/api/v1/profiles/resolve?place=slack:*:C1",
            "/api/v1/profiles/resolve?place=slack",
            "/api/v1/profiles/sessions?key=nope",
            "/api/v1/profiles/resolve",
        ):
            assert 400 <= (await client.get(path)).status_code < 500, path
        # no gateway runs on this database: nothing was reloaded, and the answer says so
        answer = (await client.post("/api/v1/reload", json={})).json()
        assert (answer["reloaded"], answer["replicas"]) == (False, [])
        assert answer["error"] == "no gateway is running on this database"
        assert (
            await client.get("/api/v1/profiles", headers={"Authorization": "x"})
        ).status_code == 401
