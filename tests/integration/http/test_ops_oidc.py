"""Operators sign in as themselves (``GATEWAY_OPS_AUTH=oidc``) against a real OpenID provider
run by the test (``oidc-provider-mock``), an ordinary HTTP client following the real redirects
of ``/ops/login``. Each of the three roles may do what it is for and is refused the rest; a
person with no role is refused at the door; the admin token still works for scripts; and the
audit log names the person behind every action."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.errors import ConfigError
from gateway.core.settings import parsed
from gateway.http.opsauth import COOKIE, PENDING_COOKIE, RoleRules, required_role
from gateway.runtime.gateway import Gateway
from tests.integration.http.test_oidc import authorize, free_port, provider, set_user
from testsupport.harness import make_settings, running_gateway

__all__ = ["provider"]  # the module-scoped provider fixture, shared with the web chat's tests

TOKEN = "a-script-token-of-at-least-32-characters"
CONFIG = '[profiles.support]\nsystem_prompt = "You help."\n[places]\n"*" = "support"\n'


@asynccontextmanager
async def ops_gateway(database_url: str, issuer: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    port = free_port()
    values: dict[str, Any] = {
        "GATEWAY_HTTP_PORT": port,
        "GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "GATEWAY_OIDC_ISSUER": issuer,
        "GATEWAY_OIDC_CLIENT_ID": "chat-gateway",
        "GATEWAY_OIDC_CLIENT_SECRET": "not-checked-by-the-mock",
        "GATEWAY_OPS_AUTH": "oidc",
        "GATEWAY_OPS_ROLES_CLAIM": "roles",
        # one role from a list, by e-mail; the others from the claim
        "GATEWAY_OPS_ADMINS": "ada@example.com",
        "GATEWAY_ADMIN_TOKEN": TOKEN,
        "GATEWAY_CONFIG_FILE": str(config),
    }
    async with running_gateway(database_url, **values) as gw:
        yield gw


@asynccontextmanager
async def signed_in(gw: Gateway, sub: str) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in at /ops as ``sub``."""
    async with httpx.AsyncClient(base_url=gw.url) as browser:
        begin = await browser.get("/ops/login")
        assert begin.status_code == 303, begin.text
        assert PENDING_COOKIE in begin.cookies
        callback = await authorize(begin.headers["location"], {"sub": sub})
        assert callback.startswith(f"{gw.url}ops/login/callback?"), callback
        back = await browser.get(callback)
        assert back.status_code == 303 and back.headers["location"] == "/ops", back.text
        assert COOKIE in browser.cookies
        yield browser


async def audit_rows(gw: Gateway) -> list[tuple[str, str, str]]:
    async with gw.store.db.connection() as conn:
        rows = await conn.fetch("SELECT action, outcome, actor FROM audit_events ORDER BY id")
    return [(r["action"], r["outcome"], r["actor"]) for r in rows]


async def test_each_role_may_do_its_part_and_the_audit_log_names_the_person(
    database_url: str, provider: str, tmp_path: Path
) -> None:
    claims: dict[str, dict[str, Any]] = {
        "sub-vera": {"email": "vera@example.com", "roles": ["viewer"]},
        "sub-otto": {"email": "otto@example.com", "roles": "operator"},
        "sub-ada": {"email": "ada@example.com"},  # admin by GATEWAY_OPS_ADMINS
        "sub-nick": {"email": "nick@example.com", "roles": ["customer"]},  # no role
    }
    for sub, values in claims.items():
        await set_user(provider, sub, email_verified=True, **values)
    async with ops_gateway(database_url, provider, tmp_path) as gw:
        person = await gw.store.people.person_of("web:local:bob")
        forget = f"/api/v1/people/{person}/forget"

        # not signed in: told where to sign in
        async with httpx.AsyncClient(base_url=gw.url) as stranger:
            answer = await stranger.get("/api/v1/audit")
            assert answer.status_code == 401 and "/ops/login" in answer.json()["detail"]

        # a person the rules give no role is refused at the door (fail closed)
        async with httpx.AsyncClient(base_url=gw.url) as nick:
            begin = await nick.get("/ops/login")
            back = await authorize(begin.headers["location"], {"sub": "sub-nick"})
            refused = await nick.get(back)
            assert refused.status_code == 403 and COOKIE not in nick.cookies

        # viewer: reads, and may not act
        async with signed_in(gw, "sub-vera") as vera:
            assert (await vera.get("/api/v1/audit")).status_code == 200
            assert (await vera.get("/api/v1/sessions")).status_code == 200
            assert (await vera.get("/api/v1/profiles")).status_code == 200
            denied = await vera.post("/api/v1/reload", json={})
            assert denied.status_code == 403, denied.text
            assert "oidc:vera@example.com has the role viewer" in denied.json()["detail"]
            assert (await vera.post("/api/v1/deliveries/1/retry")).status_code == 403
            assert (await vera.post(forget)).status_code == 403

        # operator: reloads every replica, and may not erase anyone
        async with signed_in(gw, "sub-otto") as otto:
            reload = await otto.post("/api/v1/reload", json={})
            assert reload.status_code == 200 and reload.json()["reloaded"] is True, reload.text
            assert (await otto.get("/api/v1/audit")).status_code == 200
            assert (await otto.post(forget)).status_code == 403
            assert (await otto.get(f"/api/v1/people/{person}/export")).status_code == 403

        # admin: erases
        async with signed_in(gw, "sub-ada") as ada:
            erased = await ada.post(forget)
            assert erased.status_code == 200, erased.text
            # signing out ends the session
            assert (await ada.post("/ops/logout")).status_code == 200
            assert COOKIE not in ada.cookies
            assert (await ada.get("/api/v1/audit")).status_code == 401

        # scripts keep the admin token: its own role, named in the audit log
        async with httpx.AsyncClient(
            base_url=gw.url, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as script:
            assert (await script.post("/api/v1/reload", json={})).status_code == 200
            wrong = await script.get("/api/v1/audit", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401

        rows = await audit_rows(gw)
    assert ("ops.sign_in", "denied", "oidc:nick@example.com") in rows
    for who in ("vera", "otto", "ada"):
        assert ("ops.sign_in", "ok", f"oidc:{who}@example.com") in rows
    # the refusals and the actions, each under the person's name
    assert ("admin.access", "denied", "oidc:vera@example.com") in rows
    assert ("admin.access", "denied", "oidc:otto@example.com") in rows
    reloads = [(outcome, actor) for action, outcome, actor in rows if action == "config.reload"]
    assert reloads == [("ok", "oidc:otto@example.com"), ("ok", "admin:token")]
    assert ("people.forget", "ok", "oidc:ada@example.com") in rows
    assert ("ops.sign_out", "ok", "oidc:ada@example.com") in rows


def test_roles_come_from_the_claim_and_the_lists_and_the_highest_counts() -> None:
    rules = RoleRules(claim="groups", operators=["Otto@Example.com"], viewers=["sub-1"])
    assert rules.from_claim({"groups": ["staff", "admin"]}) == ("admin",)
    assert rules.from_claim({"groups": "viewer"}) == ("viewer",)
    assert rules.from_claim({"groups": 7}) == ()
    assert rules.role(subject="sub-1", email=None, claimed=()) == "viewer"
    assert rules.role(subject="x", email="otto@example.com", claimed=("viewer",)) == "operator"
    assert rules.role(subject="x", email="otto@example.com", claimed=("admin",)) == "admin"
    assert rules.role(subject="x", email="eve@example.com", claimed=()) is None
    assert required_role("GET", "/api/v1/audit") == "viewer"
    assert required_role("POST", "/api/v1/reload") == "operator"
    assert required_role("GET", "/api/v1/people/1/export") == "admin"
    assert required_role("GET", "/mcp") == "operator"


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"GATEWAY_OPS_AUTH": "oidc"}, "GATEWAY_OIDC_ISSUER"),
        (
            {
                "GATEWAY_OPS_AUTH": "oidc",
                "GATEWAY_OIDC_ISSUER": "https://id.example.com",
                "GATEWAY_OIDC_CLIENT_ID": "gw",
                "GATEWAY_PUBLIC_URL": "https://gw.example.com",
            },
            "GATEWAY_OPS_ROLES_CLAIM",
        ),
    ],
)
def test_oidc_for_operators_needs_a_provider_and_a_rule(
    values: dict[str, str], setting: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parsed(lambda: make_settings("postgresql://unused/db", **values))
    assert caught.value.setting == setting
