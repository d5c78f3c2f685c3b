"""Guards start only when work outlasts their first wait, act on time when they do, and
never outlive the wait for their work."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from gateway.core.lifecycle.guards import Deferred, Guard, race, stop_guards


def _recording(log: list[tuple[str, float]], name: str, result: str | None = None) -> Guard:
    loop_time = asyncio.get_running_loop().time
    began = loop_time()

    async def start(first: float) -> str:
        log.append((f"{name} started", round(loop_time() - began, 2)))
        await asyncio.sleep(first)
        log.append((f"{name} acts", round(loop_time() - began, 2)))
        if result is None:
            await asyncio.Event().wait()  # acts, then keeps watching
        return result or ""

    return Guard(first=0.0, start=start, name=name)


async def test_work_over_before_the_first_wait_starts_no_guard() -> None:
    log: list[tuple[str, float]] = []
    guard = _recording(log, "renewal")
    work = asyncio.ensure_future(asyncio.sleep(0.01, result="answer"))
    done, started = await race(work, [Guard(0.5, guard.start, guard.name)])
    assert done == {work} and work.result() == "answer"
    assert started == [] and log == []


async def test_a_guard_acts_at_its_first_wait_counted_from_the_start_of_the_work() -> None:
    log: list[tuple[str, float]] = []
    watch = _recording(log, "watch", result="stop")
    renew = _recording(log, "renewal")
    work = asyncio.ensure_future(asyncio.sleep(5))
    done, started = await race(
        work,
        [Guard(0.2, watch.start, "watch"), Guard(0.1, renew.start, "renewal")],
    )
    try:
        assert [t.get_name() for t in started] == ["watch", "renewal"]
        assert done == {started[0]} and started[0].result() == "stop"
        # both start once the earliest first wait (0.1 s) is over, each acts at its own
        # (lower bounds only: a loaded machine may run the timers late, never early)
        times = dict(log)
        assert [name for name, _ in log[:2]] == ["watch started", "renewal started"]
        assert times["watch started"] >= 0.09 and times["renewal started"] >= 0.09
        assert times["watch acts"] >= 0.19
        assert [name for name, _ in log[2:]] == ["renewal acts", "watch acts"]
        assert not work.done()  # the work is the caller's to cancel
    finally:
        work.cancel()
        await stop_guards(started)
    assert all(t.cancelled() for t in started[1:])


async def test_a_cancelled_wait_cancels_the_guards_it_started() -> None:
    log: list[tuple[str, float]] = []
    renew = _recording(log, "renewal")
    work = asyncio.ensure_future(asyncio.sleep(5))
    waiting = asyncio.ensure_future(race(work, [Guard(0.05, renew.start, "renewal")]))
    await asyncio.sleep(0.15)
    assert log and log[0][0] == "renewal started"
    guards = [t for t in asyncio.all_tasks() if t.get_name() == "renewal"]
    assert len(guards) == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0)
    assert guards[0].cancelled()
    work.cancel()


async def test_a_deferred_task_stopped_before_its_delay_never_starts() -> None:
    ran: list[str] = []

    async def show() -> None:
        ran.append("shown")

    deferred = Deferred(0.05, show, "typing-indicator")
    await asyncio.sleep(0.01)
    await deferred.stop()
    await asyncio.sleep(0.1)
    assert ran == [] and not deferred.started


async def test_a_deferred_task_starts_after_its_delay_in_the_deferring_context() -> None:
    place: contextvars.ContextVar[str] = contextvars.ContextVar("place", default="none")
    seen: list[str] = []
    holding = asyncio.Event()

    async def keep() -> None:
        seen.append(place.get())
        holding.set()
        await asyncio.Event().wait()  # renewed until stopped

    place.set("slack:C1:171.1")
    deferred = Deferred(0.02, keep, "typing-indicator")
    place.set("elsewhere")
    await asyncio.wait_for(holding.wait(), 5)
    assert deferred.started and seen == ["slack:C1:171.1"]
    task = next(t for t in asyncio.all_tasks() if t.get_name() == "typing-indicator")
    await deferred.stop()
    assert task.cancelled()
