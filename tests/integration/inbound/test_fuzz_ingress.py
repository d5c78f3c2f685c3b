"""Ingress fuzzing, short form: a real ``gateway run`` with every surface on (Telegram
webhook, Slack Events API, Mattermost websocket, web chat), each platform a real local fake,
and a few hundred generated events per platform through each ingress (``campaigns/fuzz.py``;
``python -m benchmarks --only fuzz`` is the 10,000-per-platform long form).

Never a 5xx, never a dropped connection, the process alive and healthy; bad input answered 4xx
or kept as a dead letter with its reason; every good event among them answered exactly once in
its own thread."""

from __future__ import annotations

import pytest

from campaigns.fuzz import GOOD_EVERY, PLATFORMS, failures, markdown, run_fuzz

# random inputs by the thousand through the same code paths: run without coverage's line
# tracer, which doubles their CPU time for lines the other tests run too (pyproject.toml)
pytestmark = [pytest.mark.slow, pytest.mark.untraced]

COUNT = 300


async def test_fuzzed_ingress_never_fails_and_good_events_behind_bad_ones_are_answered(
    database_url: str,
) -> None:
    result = await run_fuzz(COUNT, seed=20261201, dsn=database_url)
    print("\n" + markdown(result))
    assert failures(result) == [], {p: r["error_examples"] for p, r in result["platforms"].items()}
    for platform in PLATFORMS:
        r = result["platforms"][platform]
        assert r["good"] == COUNT // GOOD_EVERY
        assert r["good_answered_once"] == r["good"], platform
        # bad input was refused or kept with its reason, not silently dropped
        assert r["inbox"].get("rejected", 0) > 0, platform
        assert all(reason for reason, _ in r["dead_letter_reasons"]), platform
        if platform != "mattermost":
            assert sum(n for s, n in r["http_status"].items() if 400 <= s < 500) > 0
