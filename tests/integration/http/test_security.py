"""The HTTP guard (gateway/security.py) against the attacks, on a real server:
DNS rebinding, cross-site posts, oversized bodies, too many live streams; and the page
headers, the admin token's length, /metrics behind the token, the bind warning."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import httpx
import pytest
import structlog

from gateway.audit.origin import AuditOrigin
from gateway.core.errors import ConfigError
from gateway.http.app import DirectPosts
from gateway.http.guard import HttpPolicy, SecurityMiddleware, page_headers
from gateway.runtime.gateway import Gateway
from testsupport.fakes.sink import SinkAdapter
from testsupport.fakes.sink_server import SinkServer
from testsupport.harness import make_settings, running_gateway, wait_for
from testsupport.process import run_cli, run_cli_in_process

TOKEN = "0123456789abcdef0123456789abcdef"
POST = "/web/api/channels/general/messages"


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _raw(port: int, head: bytes, body_chunks: int = 0, chunk: bytes = b"") -> bytes:
    """Send ``head`` (and optionally chunks of a chunked body until the server answers or
    stops reading); return what the server answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            for _ in range(body_chunks):
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
                if reader.at_eof() or len(reader._buffer) > 0:  # type: ignore[attr-defined]
                    break
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_a_rebound_dns_name_gets_403_on_every_route(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        evil = {"Host": "evil.example"}
        for path in ("/", "/web/api/channels", "/healthz", "/ops", "/metrics"):
            response = await c.get(path, headers=evil)
            assert response.status_code == 403, path
        # the transcript of a thread is not readable through the rebound name
        ok = await c.post(POST, json={"text": "secret", "client_msg_id": "m1"})
        assert ok.status_code == 200
        stolen = await c.get("/web/api/channels/general/threads/m1/messages", headers=evil)
        assert stolen.status_code == 403 and "secret" not in stolen.text
        for host in ("localhost", f"127.0.0.1:{gw.http.port}", "[::1]:80", "127.0.0.2"):
            assert (await c.get("/healthz", headers={"Host": host})).status_code == 200, host


async def test_allowed_hosts_adds_names(database_url: str) -> None:
    async with (
        running_gateway(
            database_url, GATEWAY_ALLOWED_HOSTS="chat.example.com,*.corp.example"
        ) as gw,
        httpx.AsyncClient(base_url=gw.url) as c,
    ):
        for host, status in [
            ("chat.example.com", 200),
            ("chat.example.com:443", 200),
            ("a.corp.example", 200),
            ("corp.example.evil", 403),
            ("evil.example", 403),
            ("localhost", 200),
        ]:
            assert (await c.get("/healthz", headers={"Host": host})).status_code == status, host


async def test_a_refused_host_says_which_setting_to_set(database_url: str) -> None:
    # a reverse proxy on the same host passes the public name on: the refusal names it and
    # the exact setting that lets it in, and the log warns once per name
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        proxied = {"Host": "bot.example.com", "X-Forwarded-For": "203.0.113.7"}
        with structlog.testing.capture_logs() as logs:
            for _ in range(3):
                refused = await c.post("/telegram/webhook", json={}, headers=proxied)
                assert refused.status_code == 403
            other = await c.get("/healthz", headers={"Host": "chat.example.org:8443"})
        detail = refused.json()["detail"]
        assert "bot.example.com" in detail and "GATEWAY_ALLOWED_HOSTS=bot.example.com" in detail
        assert "GATEWAY_ALLOWED_HOSTS=chat.example.org" in other.json()["detail"]
        warned = [e for e in logs if e["event"] == "http_host_not_allowed"]
        assert [(e["log_level"], e["host"]) for e in warned] == [
            ("warning", "bot.example.com"),
            ("warning", "chat.example.org"),
        ]
        assert warned[0]["fix"] == "GATEWAY_ALLOWED_HOSTS=bot.example.com"
        # a name that is no host name is not echoed back
        odd = await c.get("/healthz", headers={"Host": "<script>x</script>"})
        assert odd.status_code == 403 and "<script>" not in odd.text


async def test_cross_site_posts_are_refused(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        body = json.dumps({"text": "hi", "client_msg_id": "x1"})
        attacks = [
            {"Origin": "http://evil.example", "Content-Type": "application/json"},
            {"Origin": "null", "Content-Type": "application/json"},
            {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
            {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
            # what a cross-site <form> or a no-preflight fetch can send
            {"Content-Type": "text/plain"},
            {"Content-Type": "application/x-www-form-urlencoded"},
            {"Content-Type": "multipart/form-data; boundary=x"},
        ]
        for headers in attacks:
            response = await c.post(POST, content=body, headers=headers)
            assert response.status_code in (403, 415), headers
        # an operator button from a foreign origin never reaches its handler
        retry = await c.post(
            "/api/v1/deliveries/1/retry", headers={"Origin": "http://evil.example"}
        )
        assert retry.status_code == 403
        assert retry.json()["title"] == "Cross-site request"
        mcp = await c.post("/mcp", content="{}", headers={"Content-Type": "text/plain"})
        assert mcp.status_code == 415
        # nothing was stored by any of them
        assert await gw.store.sessions.list_sessions(limit=5) == []
        # the same request from our own page is accepted
        same = await c.post(
            POST,
            content=body,
            headers={
                "Origin": gw.url.rstrip("/"),
                "Sec-Fetch-Site": "same-origin",
                "Content-Type": "application/json",
            },
        )
        assert same.status_code == 200, same.text
        # a bodiless operator call with no content type is fine (404: no such delivery)
        assert (await c.post("/api/v1/deliveries/999/retry")).status_code == 404


async def test_an_oversized_body_gets_413_before_it_is_read(database_url: str) -> None:
    async with running_gateway(database_url) as gw:
        port = gw.http.port
        # declared: answered from the headers alone, not one byte of the body sent
        answer = await _raw(
            port,
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000000\r\n\r\n" % POST.encode(),
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # the same on the Slack webhook (once read whole before its signature check)
        answer = await _raw(
            port,
            b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 60000000\r\n\r\n",
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # chunked: counted while read and cut off at the limit; memory does not grow with
        # what the client keeps sending
        before = _rss_kib()
        answer = await _raw(
            port,
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % POST.encode(),
            body_chunks=60,
            chunk=b"x" * 1_000_000,
        )
        grown_mib = (_rss_kib() - before) / 1024
        print(f"RSS growth while 60 MB were offered chunked: {grown_mib:.1f} MiB")
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert grown_mib < 20, f"RSS grew {grown_mib:.1f} MiB"
        # under the limit is fine
        async with httpx.AsyncClient(base_url=gw.url) as c:
            ok = await c.post(POST, json={"text": "x" * 10_000, "client_msg_id": "ok1"})
            assert ok.status_code == 200


def test_a_route_can_declare_a_larger_limit() -> None:
    policy = HttpPolicy(allowed_hosts=None, max_body_bytes=1000)
    policy.allow_larger("/web/api/uploads", 5000)
    assert policy.body_limit("/web/api/uploads/x") == 5000
    assert policy.body_limit("/web/api/channels") == 1000


async def test_html_pages_carry_the_security_headers(database_url: str) -> None:
    async with running_gateway(database_url) as gw, httpx.AsyncClient(base_url=gw.url) as c:
        for path in ("/", "/ops", "/ops/sessions/1"):
            response = await c.get(path)
            assert response.status_code == 200, path
            csp = response.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp, path
            assert "'unsafe-inline'" not in csp
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.headers["referrer-policy"] == "same-origin"
        assert (await c.get("/healthz")).headers["x-content-type-options"] == "nosniff"


def test_page_headers_allow_exactly_the_inline_blocks() -> None:
    csp = page_headers(scripts=["alert(1)"])["Content-Security-Policy"]
    assert "'sha256-" in csp and "frame-ancestors 'none'" in csp


async def test_live_streams_per_client_are_capped(database_url: str) -> None:
    async with (
        running_gateway(database_url, GATEWAY_SSE_PER_CLIENT=2) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=10) as c,
    ):
        url = "/web/api/channels/general/threads/t1/stream"
        headers = {"Accept": "text/event-stream"}
        async with c.stream("GET", url, headers=headers) as one:
            assert one.status_code == 200
            async with c.stream("GET", url, headers=headers) as two:
                assert two.status_code == 200
                third = await c.get(url, headers=headers)
                assert third.status_code == 429

        # closed streams are counted down (once the server has seen the disconnects)
        async def freed() -> bool:
            async with c.stream("GET", url, headers=headers) as again:
                return again.status_code == 200

        await wait_for(freed, timeout=10, message="closed streams still counted")


def test_a_short_admin_token_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        make_settings("postgresql://x/y", GATEWAY_ADMIN_TOKEN="short")
    assert info.value.setting == "GATEWAY_ADMIN_TOKEN"
    make_settings("postgresql://x/y", GATEWAY_ADMIN_TOKEN=TOKEN)


def test_web_auth_none_on_a_public_bind_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        make_settings("postgresql://x/y", GATEWAY_HTTP_HOST="0.0.0.0")
    assert info.value.setting == "GATEWAY_WEB_AUTH"
    # fine with the web chat off, or with sign-in
    make_settings("postgresql://x/y", GATEWAY_HTTP_HOST="0.0.0.0", GATEWAY_WEB_CHAT=False)
    make_settings("postgresql://x/y", GATEWAY_HTTP_HOST="0.0.0.0", GATEWAY_WEB_AUTH="accounts")
    with pytest.raises(ConfigError) as info:
        make_settings("postgresql://x/y", GATEWAY_WEB_AUTH="proxy")
    assert info.value.setting == "GATEWAY_TRUSTED_PROXIES"
    with pytest.raises(ConfigError) as info:
        make_settings(
            "postgresql://x/y", GATEWAY_WEB_AUTH="proxy", GATEWAY_TRUSTED_PROXIES="nonsense"
        )
    assert info.value.setting == "GATEWAY_TRUSTED_PROXIES"


async def test_metrics_behind_the_token(database_url: str) -> None:
    async with (
        running_gateway(database_url, GATEWAY_ADMIN_TOKEN=TOKEN, GATEWAY_METRICS_AUTH=True) as gw,
        httpx.AsyncClient(base_url=gw.url) as c,
    ):
        assert (await c.get("/metrics")).status_code == 401
        ok = await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and "gateway_" in ok.text


async def test_a_public_bind_without_a_token_logs_a_warning(database_url: str) -> None:
    with structlog.testing.capture_logs() as logs:
        async with running_gateway(database_url, web_chat=False, GATEWAY_HTTP_HOST="0.0.0.0") as gw:
            assert isinstance(gw, Gateway)
    assert any(e["event"] == "http_exposed_without_admin_token" for e in logs)


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({"GATEWAY_HTTP_HOST": "0.0.0.0"}, "GATEWAY_WEB_AUTH"),
        ({"GATEWAY_ADMIN_TOKEN": "too-short"}, "GATEWAY_ADMIN_TOKEN"),
        ({"GATEWAY_WEB_AUTH": "proxy"}, "GATEWAY_TRUSTED_PROXIES"),
    ],
)
async def test_gateway_run_exits_2_naming_the_setting(
    tmp_path: Path, env: dict[str, str], setting: str
) -> None:
    code, _, err = await run_cli(["run"], {"GATEWAY_DATA_DIR": str(tmp_path), **env})
    assert code == 2 and setting in err, err


async def test_users_add_list_remove(database_url: str, tmp_path: Path) -> None:
    env = {"DATABASE_URL": database_url, "GATEWAY_WEB_AUTH": "accounts"}
    # the real command once (the password piped into a new process), then in-process: the
    # same main(), without an interpreter's imports each time
    code, out, err = await run_cli(["users", "add", "ann"], env, stdin=b"a long password\n")
    assert code == 0, err
    code, out, _ = await run_cli_in_process(["users", "list"], env)
    assert code == 0 and out.split("\t")[0] == "ann"
    short = await run_cli_in_process(["users", "add", "bob"], env, stdin=b"short\n")
    assert short[0] == 1 and "at least" in short[2]
    bad_name = await run_cli_in_process(["users", "add", "bad name!"], env, stdin=b"x" * 10)
    assert bad_name[0] == 1
    async with running_gateway(database_url, GATEWAY_WEB_AUTH="accounts") as gw:
        async with httpx.AsyncClient(base_url=gw.url) as c:
            ok = await c.post("/login", json={"name": "ann", "password": "a long password"})
            assert ok.status_code == 200
    code, out, _ = await run_cli_in_process(["users", "remove", "ann"], env)
    assert code == 0
    assert (await run_cli_in_process(["users", "remove", "ann"], env))[0] == 1
    assert (await run_cli_in_process(["users", "list"], env))[1] == ""


async def test_webhook_posts_go_straight_to_their_route_with_every_guard(
    database_url: str, sink: SinkServer
) -> None:
    """a POST to a webhook's fixed path skips FastAPI's route walk, never the
    guard: cross-site refusal, body bounds, headers, and the same answers on errors."""
    async with running_gateway(database_url, adapters=[SinkAdapter(sink.url)]) as gw:
        # inside the guard: SecurityMiddleware is the outermost, and the audit log's origin
        # (who, from where) is known before a direct post runs
        outer_first: list[object] = [m.cls for m in gw.app.user_middleware]
        assert outer_first == [SecurityMiddleware, AuditOrigin, DirectPosts]
        direct = DirectPosts(gw.app, router=gw.app.router, handlers={})
        table = direct.table()
        assert "/sink/inbound" in table
        assert not any("{" in path for path in table)  # never a path with parameters
        async with httpx.AsyncClient(base_url=gw.url) as c:
            ok = await c.post(
                "/sink/inbound", json={"chat": "c", "thread": "d1", "id": "1", "text": "hi"}
            )
            assert ok.status_code == 200, ok.text
            assert ok.headers["x-content-type-options"] == "nosniff"
            assert ok.headers["referrer-policy"] == "same-origin"
            cross = await c.post(
                "/sink/inbound",
                json={"chat": "c", "thread": "d1", "id": "2", "text": "hi"},
                headers={"Sec-Fetch-Site": "cross-site"},
            )
            assert cross.status_code == 403
            other_host = await c.post(
                "/sink/inbound", json={"chat": "c"}, headers={"Host": "evil.example"}
            )
            assert other_host.status_code == 403
            assert (await c.get("/sink/inbound")).status_code == 405  # through FastAPI
        answer = await _raw(
            gw.http.port,
            b"POST /sink/inbound HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nTransfer-Encoding: chunked\r\n\r\n",
            body_chunks=60,
            chunk=b"x" * 1_000_000,
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
