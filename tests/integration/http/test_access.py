"""Who may use the admin API and /mcp: a bearer token when GATEWAY_ADMIN_TOKEN is set,
otherwise loopback clients only (even with GATEWAY_HTTP_HOST=0.0.0.0), and never a page whose
DNS name was rebound to 127.0.0.1."""

from __future__ import annotations

import socket

import httpx
import pytest

from gateway.core.errors import RequestError
from gateway.http.admin import AccessPolicy
from testsupport.harness import running_gateway

MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def test_with_a_token_every_operator_call_needs_it(database_url: str) -> None:
    async with (
        running_gateway(
            database_url, GATEWAY_ADMIN_TOKEN="s3cret-token-0123456789abcdef-0123"
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as client,
    ):
        missing = await client.get("/api/v1/sessions")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == "Bearer"
        assert missing.headers["content-type"] == "application/problem+json"
        wrong = await client.get(
            "/api/v1/sessions",
            headers={"Authorization": "Bearer s3cret-token-0123456789abcdef-012X"},
        )
        assert wrong.status_code == 401
        basic = await client.get(
            "/api/v1/sessions",
            headers={"Authorization": "Basic s3cret-token-0123456789abcdef-0123"},
        )
        assert basic.status_code == 401
        good = await client.get(
            "/api/v1/sessions",
            headers={"Authorization": "Bearer s3cret-token-0123456789abcdef-0123"},
        )
        assert good.status_code == 200 and good.json()["items"] == []

        mcp = await client.post("/mcp", json=MCP_INIT, headers=MCP_HEADERS)
        assert mcp.status_code == 401
        mcp = await client.post(
            "/mcp",
            json=MCP_INIT,
            headers={**MCP_HEADERS, "Authorization": "Bearer s3cret-token-0123456789abcdef-0123"},
        )
        assert mcp.status_code == 200, mcp.text

        # the pages and the health endpoints hold no data and stay open
        assert (await client.get("/ops")).status_code == 200
        assert (await client.get("/healthz")).status_code == 200


async def test_without_a_token_only_loopback_clients_get_in_even_on_all_interfaces(
    database_url: str,
) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    async with running_gateway(
        database_url, GATEWAY_HTTP_HOST="0.0.0.0", GATEWAY_WEB_AUTH="accounts"
    ) as gw:
        port = gw.http.port
        async with httpx.AsyncClient() as client:
            local = await client.get(f"http://127.0.0.1:{port}/api/v1/sessions")
            assert local.status_code == 200
            remote = await client.get(f"http://{address}:{port}/api/v1/sessions")
            assert remote.status_code == 403
            assert "GATEWAY_ADMIN_TOKEN" in remote.json()["detail"]
            remote_mcp = await client.post(
                f"http://{address}:{port}/mcp", json=MCP_INIT, headers=MCP_HEADERS
            )
            assert remote_mcp.status_code == 403
            # the web chat itself is not operator-only (it has its own sign-in)
            page = await client.get(f"http://{address}:{port}/")
            assert page.status_code in (200, 303)


async def test_without_a_token_a_rebound_dns_name_is_refused(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as client:
        evil = {"Host": "attacker.example:8080"}
        assert (await client.get("/api/v1/sessions", headers=evil)).status_code == 403
        mcp = await client.post("/mcp", json=MCP_INIT, headers={**MCP_HEADERS, **evil})
        assert mcp.status_code == 403
        for host in ("localhost", f"localhost:{gw.http.port}", "127.0.0.1"):
            ok = await client.get("/api/v1/sessions", headers={"Host": host})
            assert ok.status_code == 200, host


@pytest.mark.parametrize(
    ("client", "host", "allowed"),
    [
        ("127.0.0.1", "127.0.0.1:8080", True),
        ("127.9.9.9", "localhost", True),
        ("::1", "[::1]:8080", True),
        ("::ffff:127.0.0.1", "localhost:80", True),
        ("10.0.0.5", "127.0.0.1:8080", False),
        ("::ffff:10.0.0.5", "localhost", False),
        ("192.168.1.2", "localhost", False),
        (None, "localhost", False),
        ("not-an-ip", "localhost", False),
        ("127.0.0.1", "gateway.example.com", False),
        ("127.0.0.1", "127.0.0.1.evil.example", False),
        ("127.0.0.1", "", False),
    ],
)
def test_loopback_policy_table(client: str | None, host: str, allowed: bool) -> None:
    policy = AccessPolicy(None)
    if allowed:
        policy.check(client=client, host=host, authorization=None)
    else:
        with pytest.raises(RequestError) as info:
            policy.check(client=client, host=host, authorization=None)
        assert info.value.status == 403


def test_a_token_is_needed_from_loopback_too() -> None:
    policy = AccessPolicy("t0ken")
    with pytest.raises(RequestError) as info:
        policy.check(client="127.0.0.1", host="localhost", authorization=None)
    assert info.value.status == 401
    policy.check(client="203.0.113.9", host="gw.example", authorization="bearer t0ken")
