"""Start-up errors name the setting that fixes them."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from gateway.core.errors import ConfigError
from testsupport.harness import running_gateway
from testsupport.process import run_cli


@pytest.fixture
def busy_port() -> Iterator[int]:
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        yield int(holder.getsockname()[1])
    finally:
        holder.close()


async def test_busy_port_is_a_config_error_naming_gateway_http_port(
    database_url: str, busy_port: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        async with running_gateway(database_url, GATEWAY_HTTP_PORT=busy_port):
            pass
    assert caught.value.setting == "GATEWAY_HTTP_PORT"
    assert f"port {busy_port} on 127.0.0.1 is already in use" in str(caught.value)


async def test_gateway_run_on_a_busy_port_exits_2_naming_the_setting(
    database_url: str, busy_port: int
) -> None:
    # it printed "[Errno 98] Address already in use" and exited 1
    code, _, err = await run_cli(
        ["run"], {"DATABASE_URL": database_url, "GATEWAY_HTTP_PORT": str(busy_port)}
    )
    assert code == 2, err
    assert "configuration error: GATEWAY_HTTP_PORT: port" in err
    assert "Errno" not in err


async def test_doctor_finds_the_busy_port_and_names_the_setting(busy_port: int) -> None:
    from gateway.core.settings import Settings
    from gateway.ops.doctor import check_http_port

    def settings(port: int) -> Settings:
        return Settings(_env_file=None, GATEWAY_HTTP_PORT=port)  # type: ignore[call-arg]

    busy = check_http_port(settings(busy_port))
    assert not busy.ok and f"port {busy_port} on 127.0.0.1 is already in use" in busy.detail
    assert busy.fix is not None and "set GATEWAY_HTTP_PORT to a free one" in busy.fix
    assert check_http_port(settings(0)).ok


async def test_doctor_beside_a_running_gateway_calls_its_port_ok(database_url: str) -> None:
    # a gateway holds the port and answers /healthz: that is the gateway doctor is checking,
    # not a conflict (it said "BAD http" and exited 1). Doctor runs with the settings that
    # gateway was started with (its port, the harness's tuning, and the
    # json log format every CLI run of the tests gets), as beside a real one
    # started from the same .env: the running gateway's settings check then says ok too.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with running_gateway(
        database_url, GATEWAY_HTTP_PORT=port, GATEWAY_LOG_FORMAT="json"
    ) as gw:
        assert gw.http.port == port
        tuning = {
            name: str(getattr(gw.settings, name.lower()))
            for name in (
                "GATEWAY_POLL_SECONDS",
                "GATEWAY_LEASE_SECONDS",
                "GATEWAY_TURN_WORKERS",
                "GATEWAY_DELIVERY_WORKERS",
            )
        }
        code, out, _ = await run_cli(
            ["doctor"],
            {"DATABASE_URL": database_url, "GATEWAY_HTTP_PORT": str(port), **tuning},
        )
    assert f"ok  http: port {port} on 127.0.0.1 is in use by a running gateway" in out, out
    assert f"ok  running gateway: the gateway on 127.0.0.1:{port} runs with these" in out, out
    assert code == 0, out
