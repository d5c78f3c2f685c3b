"""The fault campaign's short form: three real ``gateway run`` replicas on a PostgreSQL of
their own, seeded load across 200 threads, SIGKILLs, a database restart, 429/5xx/timeouts on
sends, duplicate and poison inbound messages. Nothing may be lost, duplicated, misrouted or
leaked (``python -m benchmarks --only faults --minutes 10`` is the long form)."""

from __future__ import annotations

import pytest

from campaigns.faults import markdown, run_campaign
from campaigns.platforms import DRIVERS

pytestmark = pytest.mark.slow


async def test_campaign_short_form_loses_duplicates_misroutes_and_leaks_nothing() -> None:
    result = await run_campaign(0.5, seed=12, kill_every=9.0)
    print("\n" + markdown(result))
    assert result["accepted"] > 100
    assert (result["lost"], result["duplicated"], result["misrouted"], result["leaked"]) == (
        0,
        0,
        0,
        0,
    ), result["examples"]
    assert result["poison_answered"] == result["poison_offered"] > 0
    assert result["faults"].get("sigkill", 0) >= 1 and result["faults"]["db_restart"] == 1
    assert all(n == 0 for n in result["unrecovered_faults"].values())


async def test_campaign_on_the_real_platforms_loses_duplicates_misroutes_leaks_nothing() -> None:
    """The same on every real surface (``campaigns.platforms.DRIVERS``): Telegram polling,
    Slack's signed Events API and the Mattermost websocket (each a real local fake driven by
    the real client library), the web chat, Matrix on a real Synapse homeserver, Discord's
    gateway WebSocket and Teams' signed activities (fakes driven by the real SDKs), with
    SIGKILLs, a database restart and Mattermost socket drops (1006) whose gap only
    reconciliation can cover. The 200 threads are shared among the surfaces."""
    result = await run_campaign(0.5, seed=5, kill_every=9.0, platforms=True)
    print("\n" + markdown(result))
    assert result["accepted"] > 100
    assert (result["lost"], result["duplicated"], result["misrouted"], result["leaked"]) == (
        0,
        0,
        0,
        0,
    ), result["examples"]
    assert result["offer_errors"] == []
    assert set(result["by_platform"]) == set(DRIVERS)
    for name, row in result["by_platform"].items():
        assert row["accepted"] > 0, name
        assert (row["lost"], row["duplicated"], row["misrouted"]) == (0, 0, 0), name
    assert result["faults"]["db_restart"] == 1
    assert result["faults"].get("mattermost_socket_drop", 0) >= 1
    assert all(n == 0 for n in result["unrecovered_faults"].values())
