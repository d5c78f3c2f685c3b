"""The one reading of a rate-limited answer's wait: ``Retry-After`` as seconds or an HTTP
date, a default where a 429 names none, and a JSON body's count in its own unit."""

from __future__ import annotations

import time
from email.utils import formatdate

from gateway.core.retry_after import (
    DEFAULT_RETRY_AFTER,
    body_seconds,
    parse_retry_after,
    retry_after_or_default,
)


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    assert parse_retry_after("20") == 20.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("  ") is None
    assert parse_retry_after("-3") == 0.0
    now = time.time()
    assert 29 <= (parse_retry_after(formatdate(now + 30, usegmt=True), now=now) or 0) <= 31
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now=now) == 0.0


def test_a_429_without_a_readable_wait_waits_the_default() -> None:
    assert retry_after_or_default("7") == 7.0
    assert retry_after_or_default("0") == 0.0, "a zero wait is kept, not replaced"
    assert retry_after_or_default(None) == DEFAULT_RETRY_AFTER
    assert retry_after_or_default("soon", 2.5) == 2.5


def test_a_body_count_is_read_in_its_own_unit() -> None:
    assert body_seconds(1.25) == 1.25  # Discord: seconds
    assert body_seconds(1500, per_second=1000) == 1.5  # Matrix: milliseconds
    assert body_seconds(0) == 0.0
    for bad in (None, True, "2", -1, float("nan")):
        assert body_seconds(bad) is None, bad
