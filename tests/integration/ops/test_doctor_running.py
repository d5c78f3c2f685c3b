"""``gateway doctor`` beside a running gateway: it compares the settings it reads with the
ones the gateway runs with (``GET /api/v1/settings/fingerprint``, hashes only) and names the
settings a restart would change."""

from __future__ import annotations

import asyncio
import socket

import httpx

from gateway.ops.doctor import check_running_settings
from testsupport.harness import running_gateway


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_doctor_names_the_settings_the_running_gateway_does_not_use(
    database_url: str,
) -> None:
    port = _free_port()
    async with running_gateway(database_url, AGENT="echo", GATEWAY_HTTP_PORT=port) as gw:
        async with httpx.AsyncClient(base_url=gw.url) as http:
            served = (await http.get("/api/v1/settings/fingerprint")).json()["settings"]
        # (doctor asks from a thread, as here: the gateway serves on this event loop)
        same = await asyncio.to_thread(check_running_settings, gw.settings)
        # then .env changes: another agent, another model server
        changed = gw.settings.model_copy(
            update={"agent": "openai", "openai_base_url": "http://127.0.0.1:9/v1"}
        )
        after_edit = await asyncio.to_thread(check_running_settings, changed)
    after_stop = check_running_settings(gw.settings)
    assert "AGENT" in served and "TELEGRAM_BOT_TOKEN" in served
    assert all(len(h) == 16 for h in served.values()), "hashes, never values"
    (fine,) = same
    assert fine.ok, fine
    (check,) = after_edit
    assert not check.ok
    assert check.detail.endswith(": AGENT, OPENAI_BASE_URL"), check.detail
    assert check.fix is not None and "restart" in check.fix
    assert after_stop == [], "no gateway running: nothing to compare"
