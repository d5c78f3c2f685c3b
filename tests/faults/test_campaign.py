"""The fault campaign's short form: three real ``gateway run`` replicas on a PostgreSQL of
their own, seeded load across 200 threads, SIGKILLs, a database restart, 429/5xx/timeouts on
sends, duplicate and poison inbound messages. Nothing may be lost, duplicated, misrouted or
leaked (``python -m benchmarks --only faults --minutes 10`` is the long form)."""

from __future__ import annotations

import pytest

from benchmarks.faults import markdown, run_campaign

pytestmark = pytest.mark.slow


async def test_campaign_short_form_loses_duplicates_misroutes_and_leaks_nothing() -> None:
    result = await run_campaign(0.75, seed=12, kill_every=12.0)
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
