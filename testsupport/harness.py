"""Helpers for end-to-end tests: run a real Gateway (real store, real workers, real HTTP
server on an ephemeral port) against a test database, and wait for conditions with a
deadline instead of sleeping.

Usage::

    async with running_gateway(database_url, adapters=[my_adapter]) as gw:
        ...  # gw.url, gw.store, gw.intake, gw.metrics
        await wait_for(lambda: fake.sent_messages(), timeout=10)
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from gateway.agents.base import Agent, EchoAgent
from gateway.core.domain import Envelope, Extracted, Ignored, Rejected, SessionKey
from gateway.core.ports import ApprovalClick, ClickOutcome, IngestOutcome, PlatformAdapter
from gateway.core.profile import Profile
from gateway.core.settings import Settings
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from gateway.runtime.gateway import Gateway
from session_store.store import Store

T = TypeVar("T")


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings for a test: nothing from the environment or a .env file, fast polling."""
    values: dict[str, Any] = {
        "DATABASE_URL": database_url,
        "GATEWAY_HTTP_PORT": 0,
        "GATEWAY_POLL_SECONDS": 0.2,
        "GATEWAY_LEASE_SECONDS": 5.0,
        "GATEWAY_TURN_WORKERS": 4,
        "GATEWAY_DELIVERY_WORKERS": 4,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def running_gateway(
    database_url: str,
    *,
    adapters: Sequence[PlatformAdapter] = (),
    agent: Agent | None = None,
    web_chat: bool = True,
    prepare: Callable[[Gateway], None] | None = None,
    **settings_overrides: Any,
) -> AsyncIterator[Gateway]:
    """A started gateway; ``prepare`` runs after it is built and before it starts (a test's
    own tools must exist before a worker can take over a turn waiting from a restart)."""
    settings = make_settings(database_url, GATEWAY_WEB_CHAT=web_chat, **settings_overrides)
    store = await Store.connect(database_url, min_size=1, max_size=10)
    gateway = Gateway(settings, store=store, agent=agent or EchoAgent(), adapters=list(adapters))
    if prepare is not None:
        prepare(gateway)
    try:
        await gateway.start()
        try:
            yield gateway
        finally:
            await gateway.stop()
    finally:
        await store.close()


@overload
async def wait_for(
    condition: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


@overload
async def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
) -> T: ...


async def wait_for(
    condition: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str = "condition not met",
) -> Any:
    """Poll ``condition`` (sync or async) until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s: {message}")
        await asyncio.sleep(interval)


async def settled_answers(
    read: Callable[[], Awaitable[list[str]]],
    *,
    count: int = 1,
    seconds: float = 20,
    steady_reads: int = 6,
) -> list[str]:
    """A thread's answers (``read`` every 0.1 s) once there are ``count`` of them and they
    stayed the same ``steady_reads`` reads in a row: a preview edited into its final text,
    nothing more coming."""
    last: list[str] | None = None
    steady = 0
    for _ in range(int(seconds / 0.1)):
        found = await read()
        if len(found) >= count and found == last:
            steady += 1
            if steady >= steady_reads:
                return found
        else:
            steady = 0
        last = found
        await asyncio.sleep(0.1)
    raise AssertionError(f"answers never settled: {last!r}")


def assert_paced(
    times: Sequence[float], interval: float, burst: int, *, at_least: float = 1.0
) -> None:
    """Calls seen at ``times`` kept to a pace of one per ``interval`` after a burst of at most
    ``burst`` (``gateway.outbox.pacing``, GCRA): any k calls in a row span at least ``k - burst``
    intervals. ``at_least`` spares part of that for a loaded machine's scheduling, which can
    delay one request's arrival more than the next one's (unpaced calls arrive within
    milliseconds of each other)."""
    times = sorted(times)
    assert len(times) > burst, f"{len(times)} calls: too few to see a pace after the burst"
    for k in range(burst + 1, len(times) + 1):
        for first in range(len(times) - k + 1):
            span = times[first + k - 1] - times[first]
            assert span >= (k - burst) * interval * at_least, (
                f"{k} calls from #{first} within {span:.3f}s"
            )


@dataclass(frozen=True, slots=True)
class Submitted:
    """One ``submit`` call the intake accepted; unpacks as ``(extracted, raw)``."""

    extracted: Extracted
    raw: Mapping[str, Any] | None
    returned_at: float  # time.monotonic() when submit returned

    def __iter__(self) -> Iterator[Any]:
        return iter((self.extracted, self.raw))


class RecordingIntake:
    """The ``Intake`` port for adapter tests: records what the adapter hands the core, stores
    nothing, dedupes nothing. Like the core's door it applies the answer policy first
    (``gateway.inbound.ingress.admit``) with ``rules`` (by default: no lists, no wording of a
    platform), so what it records is what the core would store.

    Failure and timing knobs, each off by default: ``fail_next`` makes the next N submits
    raise (a database outage; pass it at construction for "the first N"), ``fail`` makes
    submits of matching events raise, ``gate`` makes every submit wait for it (to observe the
    adapter while a submit is in flight), ``delay``/``delays`` make submits slow (a store that
    takes its time; ``delays`` are consumed first, one per call).
    """

    def __init__(
        self,
        *,
        fail_next: int = 0,
        fail: Callable[[Extracted], bool] | None = None,
        cursors: Mapping[str, str] | None = None,
        rules: AnswerRules | None = None,
    ) -> None:
        self.rules = rules if rules is not None else AnswerRules()
        self.submitted: list[Submitted] = []
        self.feedback: list[dict[str, Any]] = []
        self.clicks: list[ApprovalClick] = []
        #: the durable cursor store (pass a previous one to model a restart)
        self.cursors: dict[str, str] = dict(cursors or {})
        #: keys with an envelope submitted: what ``knows`` answers True for
        self.known: set[SessionKey] = set()
        self.knows_calls: list[SessionKey] = []
        self.fail_next = fail_next
        self.fail = fail
        #: the profile of each place (``Places``); others have the built-in default
        self.profiles: dict[SessionKey, Profile] = {}
        self.gate: asyncio.Event | None = None
        self.delay = 0.0
        self.delays: list[float] = []
        #: submit calls, failed ones included; ``failures`` counts the ones that raised
        self.attempts = 0
        self.failures = 0
        self.in_submit = 0

    def admit(self, extracted: Extracted) -> Extracted:
        return admit(extracted, self.rules)

    def profile(self, key: SessionKey) -> Profile:
        return self.profiles.get(key) or Profile(name="default")

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        extracted = admit(extracted, self.rules)
        self.attempts += 1
        self.in_submit += 1
        try:
            if self.gate is not None:
                await self.gate.wait()
            delay = self.delays.pop(0) if self.delays else self.delay
            if delay:
                await asyncio.sleep(delay)  # the store taking its time, not a wait-for-condition
            if self.fail_next or (self.fail is not None and self.fail(extracted)):
                self.fail_next = max(self.fail_next - 1, 0)
                self.failures += 1
                raise RuntimeError("database is down (test)")
            self.submitted.append(Submitted(extracted, raw, time.monotonic()))
        finally:
            self.in_submit -= 1
        if isinstance(extracted, Envelope):
            self.known.add(extracted.key)
            return IngestOutcome(status="accepted", session_id=1, seq_no=len(self.submitted))
        if isinstance(extracted, Rejected):
            return IngestOutcome(status="rejected", reason=extracted.reason)
        return IngestOutcome(status="ignored", reason=extracted.reason)

    async def lead(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        await body()  # one process: it always leads

    async def supervise(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        await body()  # no supervisor here (tests/unit/adapters/slack/test_socket_mode.py has one)

    async def knows(self, key: SessionKey) -> bool:
        self.knows_calls.append(key)
        return key in self.known

    async def load_cursor(self, name: str) -> str | None:
        return self.cursors.get(name)

    async def save_cursor(self, name: str, value: str) -> None:
        self.cursors[name] = value

    async def approval_click(self, click: ApprovalClick) -> ClickOutcome:
        self.clicks.append(click)
        return ClickOutcome(outcome="unknown", message="no approvals in this test")

    async def stop_answer(self, *, platform: str, chat_id: str, message_id: str) -> bool:
        self.feedback.append(
            {"platform": platform, "chat_id": chat_id, "message_id": message_id, "stop": True}
        )
        return True

    async def record_feedback(
        self, *, platform: str, chat_id: str, message_id: str, user_id: str, value: int
    ) -> bool:
        self.feedback.append(
            {
                "platform": platform,
                "chat_id": chat_id,
                "message_id": message_id,
                "user_id": user_id,
                "value": value,
            }
        )
        return True

    # --- views for assertions
    @property
    def extracted(self) -> list[Extracted]:
        return [s.extracted for s in self.submitted]

    @property
    def envelopes(self) -> list[Envelope]:
        return [s.extracted for s in self.submitted if isinstance(s.extracted, Envelope)]

    @property
    def ignored(self) -> list[Ignored]:
        return [s.extracted for s in self.submitted if isinstance(s.extracted, Ignored)]

    @property
    def rejected(self) -> list[Rejected]:
        return [s.extracted for s in self.submitted if isinstance(s.extracted, Rejected)]

    def texts(self) -> list[str]:
        return [e.text for e in self.envelopes]

    def by_message(self, message_id: str) -> list[Envelope]:
        return [e for e in self.envelopes if e.message_id == message_id]
