"""When the model provider struggles: which failures are worth another try, how long to wait
before it, and when to give up on a model and try the next one.

One policy for every request a turn makes: a failure the provider may get over (429, 5xx,
a timeout, a stream that broke off) is retried after the provider's own ``Retry-After`` when
it sends one, else after a capped exponential backoff with jitter, for as long as the turn's
deadline (``AGENT_RETRY_DEADLINE_SECONDS``) allows. A model that still fails hands over to the
next of ``AGENT_FALLBACK_MODELS``; each model gets an equal share of what is left of the
deadline, so the chosen one never eats the fallbacks' time. A wait longer than what is left
(a 600 s ``Retry-After``) is not waited out: the next model is tried at once.

A failure that ends the turn is a ``ProviderFailure`` naming its cause (rate limited,
unavailable, timed out), which is what the apology in the thread says.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import httpx

from gateway.core.errors import AgentError
from gateway.core.retry_after import parse_retry_after

T = TypeVar("T")

Cause = Literal["rate_limited", "unavailable", "timed_out", "refused"]

#: statuses that may pass: overload, rate limits and server errors (a chat completion has no
#: side effect a retry could double)
RETRYABLE = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

#: failed requests after which a model hands over to the next one, while another is left
HAND_OVER_AFTER = 2


class ProviderFailure(AgentError):
    """A request to the model server failed. ``cause`` says why in the thread's terms;
    ``retry_after`` is the server's own wait, when it sent one; ``retryable`` failures may
    pass (a refused request, 400 or 401, will not)."""

    def __init__(
        self,
        message: str,
        *,
        cause: Cause,
        status: int | None = None,
        retry_after: float | None = None,
        model: str | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.cause: Cause = cause
        self.retry_after = retry_after
        self.model = model

    @property
    def retryable(self) -> bool:
        return self.cause != "refused"


def cause_of_status(status: int) -> Cause:
    if status == 429:
        return "rate_limited"
    if status in (408, 504):
        return "timed_out"
    if status in RETRYABLE:
        return "unavailable"
    return "refused"


def failure_from_response(response: httpx.Response, *, what: str, detail: str) -> ProviderFailure:
    status = response.status_code
    reason = f"{what} answered HTTP {status}"
    return ProviderFailure(
        f"{reason}: {detail}" if detail else reason,
        cause=cause_of_status(status),
        status=status,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )


def failure_from_transport(exc: httpx.HTTPError, *, what: str) -> ProviderFailure:
    if isinstance(exc, httpx.TimeoutException):
        return ProviderFailure(f"{what} did not answer in time", cause="timed_out")
    if isinstance(exc, httpx.ConnectError):
        return ProviderFailure(f"cannot reach {what}", cause="unavailable")
    return ProviderFailure(f"{what} connection failed ({type(exc).__name__})", cause="unavailable")


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    #: seconds one turn may spend on the provider, every retry and fallback included
    deadline: float = 90.0
    #: the first backoff without a Retry-After, doubled per attempt up to ``cap``
    base: float = 0.5
    cap: float = 20.0
    #: a wait is never shorter than this (a Retry-After of 0 is not a busy loop)
    floor: float = 0.05

    def backoff(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before attempt ``attempt + 1``: the server's ``Retry-After`` (plus
        up to 10 % jitter, so replicas do not return in step), else a capped exponential
        backoff with equal jitter."""
        if retry_after is not None:
            return max(self.floor, retry_after * (1 + rng.uniform(0, 0.1)))
        step = min(self.cap, self.base * 2.0 ** max(0, attempt - 1))
        return max(self.floor, step / 2 + rng.uniform(0, step / 2))


class Waiting:
    """What the agent tells the turn while it waits (``gateway.agents.base.ProviderProgress``);
    the default tells no one."""

    def asking(self, model: str) -> None:
        return None

    def waiting(self, cause: str, seconds: float) -> None:
        return None

    def answering(self) -> None:
        return None


@dataclass(slots=True)
class Budget:
    """The turn's deadline, and each model's share of it."""

    policy: RetryPolicy
    started: float

    @classmethod
    def start(cls, policy: RetryPolicy) -> Budget:
        return cls(policy=policy, started=time.monotonic())

    def left(self) -> float:
        return self.policy.deadline - (time.monotonic() - self.started)

    def share(self, models_left: int) -> float:
        """The moment (monotonic) this model's retries end: an equal part of what is left."""
        return time.monotonic() + max(0.0, self.left()) / max(1, models_left)


async def retried(
    attempt: Callable[[float], Awaitable[T]],
    *,
    policy: RetryPolicy,
    until: float,
    rng: random.Random,
    sleep: Callable[[float], Awaitable[None]],
    on_failure: Callable[[ProviderFailure, int], Awaitable[None]] | None = None,
    on_wait: Callable[[ProviderFailure, float], None] | None = None,
    once: bool = False,
    hand_over: Callable[[ProviderFailure, int], Awaitable[bool]] | None = None,
) -> T:
    """``attempt(timeout)`` until it succeeds, a failure that will not pass, or ``until``
    (monotonic) leaves no room for the next wait; then its last ``ProviderFailure``.
    ``once``: a single attempt (a model whose breaker is open and no other left).
    ``hand_over(failure, attempts)``: true when the caller moves on after this failure (to
    another model) instead of waiting for another try."""
    n = 0
    while True:
        n += 1
        room = until - time.monotonic()
        try:
            return await attempt(max(1.0, room))
        except ProviderFailure as failure:
            if on_failure is not None:
                await on_failure(failure, n)
            if once or not failure.retryable:
                raise
            if hand_over is not None and await hand_over(failure, n):
                raise
            wait = policy.backoff(n, failure.retry_after, rng)
            if time.monotonic() + wait >= until - 0.5:
                raise
            if on_wait is not None:
                on_wait(failure, wait)
            await sleep(wait)
