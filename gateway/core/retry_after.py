"""How long a rate-limited answer asks us to wait, in seconds: an HTTP ``Retry-After``
(delta-seconds or an HTTP date, RFC 9110 §10.2.3), or a number in a JSON error body
(Discord's ``retry_after`` in seconds, Matrix's ``retry_after_ms`` in milliseconds).

One parser for the model provider's answers and every surface's, so a header reads the same
wherever it comes from."""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime

#: the wait for a rate-limited answer that names none (or one that cannot be read)
DEFAULT_RETRY_AFTER = 1.0


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date; None when absent or bad.
    A negative count or a date in the past is 0."""
    if value is None or not value.strip():
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_after_or_default(value: str | None, default: float = DEFAULT_RETRY_AFTER) -> float:
    """``parse_retry_after``, or ``default`` when the header is absent or bad (a 429 is
    always waited out, so it always has a wait)."""
    seconds = parse_retry_after(value)
    return default if seconds is None else seconds


def body_seconds(value: object, *, per_second: int = 1) -> float | None:
    """A JSON body's wait in seconds: ``value`` a number (not a bool) of ``1/per_second``
    seconds, not negative (``per_second=1000`` for a count of milliseconds); None otherwise."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return value / per_second
    return None
