"""The typing lease: shown at once, renewed before it expires, always cleared at the end
(even when showing it fails), and a hanging clear never holds the turn back."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import cast

import pytest

from gateway.core.domain import ReplyTarget
from gateway.core.ports import Transport
from gateway.turns import typing as typing_lease
from gateway.turns.typing import hold_typing
from testsupport.harness import wait_for

TARGET = ReplyTarget(platform="rec", scope="s", chat_id="c", thread_id="t")


class Recorder:
    """Only what ``hold_typing`` uses of a transport."""

    def __init__(self, *, interval: float, fail: bool = False, hang: bool = False) -> None:
        self.typing_interval = interval
        self.fail = fail
        self.hang = hang
        self.events: list[tuple[str, float]] = []

    async def typing(self, target: ReplyTarget) -> None:
        self.events.append(("typing", time.monotonic()))
        if self.fail:
            raise RuntimeError("platform down")

    async def clear_typing(self, target: ReplyTarget) -> None:
        self.events.append(("clear", time.monotonic()))
        if self.hang:
            await asyncio.Event().wait()


async def stop(task: asyncio.Task[None]) -> float:
    started = time.monotonic()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return time.monotonic() - started


async def test_heartbeat_renews_then_clears_once() -> None:
    rec = Recorder(interval=0.05)
    task = asyncio.create_task(hold_typing(cast(Transport, rec), TARGET))
    await wait_for(lambda: len(rec.events) >= 4, timeout=5)
    await stop(task)
    kinds = [k for k, _ in rec.events]
    assert kinds[-1] == "clear" and kinds.count("clear") == 1
    assert set(kinds[:-1]) == {"typing"}
    beats = [t for k, t in rec.events if k == "typing"]
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert all(g >= 0.04 for g in gaps)  # paced by typing_interval, not a busy loop


async def test_cleared_even_when_showing_fails() -> None:
    rec = Recorder(interval=0.02, fail=True)
    task = asyncio.create_task(hold_typing(cast(Transport, rec), TARGET))
    await wait_for(lambda: len(rec.events) >= 3, timeout=5)
    assert not task.done()  # a failing indicator never ends (or fails) the turn
    await stop(task)
    assert rec.events[-1][0] == "clear"


async def test_hanging_clear_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(typing_lease, "CLEAR_TIMEOUT", 0.1)
    rec = Recorder(interval=10, hang=True)
    task = asyncio.create_task(hold_typing(cast(Transport, rec), TARGET))
    await wait_for(lambda: rec.events, timeout=5)
    assert await stop(task) < 2
    assert [k for k, _ in rec.events] == ["typing", "clear"]
