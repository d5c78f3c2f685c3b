"""The retry policy: Retry-After honoured (``gateway.core.retry_after``), a capped exponential
backoff with jitter otherwise, never past the deadline; a refused request is not retried."""

from __future__ import annotations

import random
import time

import pytest

from gateway.agents.retry import ProviderFailure, RetryPolicy, retried
from gateway.turns.stages.provider import status_line


def test_backoff_honours_retry_after_and_otherwise_grows_to_its_cap_with_jitter() -> None:
    policy = RetryPolicy(base=0.5, cap=4.0)
    rng = random.Random(7)
    assert 20.0 <= policy.backoff(1, 20.0, rng) <= 22.0
    waits = [policy.backoff(n, None, rng) for n in range(1, 9)]
    assert 0.25 <= waits[0] <= 0.5
    assert all(2.0 <= w <= 4.0 for w in waits[4:]), "capped, with equal jitter"
    assert len({round(w, 6) for w in waits[4:]}) > 1, "jittered"


async def _run(failures: list[ProviderFailure], until: float, once: bool = False) -> list[float]:
    slept: list[float] = []

    async def attempt(timeout: float) -> str:
        if failures:
            raise failures.pop(0)
        return "ok"

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    result = await retried(
        attempt,
        policy=RetryPolicy(base=0.1),
        until=until,
        rng=random.Random(1),
        sleep=sleep,
        once=once,
    )
    assert result == "ok"
    return slept


async def test_retried_waits_out_a_retry_after_inside_the_deadline() -> None:
    busy = ProviderFailure("429", cause="rate_limited", retry_after=2.0)
    slept = await _run([busy], until=time.monotonic() + 10)
    assert len(slept) == 1 and 2.0 <= slept[0] <= 2.2


async def test_a_wait_longer_than_the_deadline_is_not_waited_out() -> None:
    busy = ProviderFailure("429", cause="rate_limited", retry_after=600.0)
    with pytest.raises(ProviderFailure) as raised:
        await _run([busy], until=time.monotonic() + 10)
    assert raised.value.cause == "rate_limited"


async def test_refused_and_single_attempts_are_not_retried() -> None:
    with pytest.raises(ProviderFailure):
        await _run([ProviderFailure("401", cause="refused")], until=time.monotonic() + 10)
    with pytest.raises(ProviderFailure):
        await _run(
            [ProviderFailure("503", cause="unavailable")], until=time.monotonic() + 10, once=True
        )


def test_status_lines_say_why_and_when() -> None:
    assert status_line("rate_limited", 19.2) == "the model is busy, retrying in 20 s"
    assert status_line("unavailable", 0.1) == "the model is unavailable, retrying in 1 s"
    assert status_line("timed_out", None) == "the model is slow to answer, trying again…"
    assert status_line(None, None) == "still waiting for the model…"
