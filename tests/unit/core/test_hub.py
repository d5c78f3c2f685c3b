from __future__ import annotations

import asyncio

from gateway.core.hub import KeyedLock, WorkSignal


async def test_keyed_lock_serializes_one_key_and_forgets_it_afterwards() -> None:
    locks = KeyedLock()
    order: list[str] = []

    async def work(key: str, name: str, delay: float) -> None:
        async with locks.hold(key):
            order.append(f"{name}+")
            await asyncio.sleep(delay)
            order.append(f"{name}-")

    await asyncio.gather(work("a", "1", 0.05), work("a", "2", 0), work("b", "3", 0))
    assert order.index("1-") < order.index("2+")  # same key: one after the other
    assert order.index("3+") < order.index("1-")  # another key is not blocked
    assert len(locks) == 0  # released keys are dropped: the map stays bounded


async def test_a_work_signal_wakes_exactly_one_worker_per_unit_of_work() -> None:
    """a level-triggered wake-up woke every idle worker, and each made an empty
    claim. One ``set`` now lets one worker through; sets nobody waited for are kept."""
    signal = WorkSignal()
    woken: list[int] = []

    async def worker(n: int) -> None:
        if await signal.wait(5):
            woken.append(n)

    tasks = [asyncio.create_task(worker(n)) for n in range(3)]
    await asyncio.sleep(0.01)  # all three are waiting
    signal.set()
    await asyncio.sleep(0.01)
    assert len(woken) == 1
    signal.wake_all()  # shutdown: the rest return at once
    await asyncio.gather(*tasks)
    assert len(woken) == 3
    signal.set()
    signal.set()
    assert signal.pending == 2
    assert await signal.wait(0) and await signal.wait(0)
    assert not await signal.wait(0.01)  # no token left: times out
    assert signal.pending == 0 and not signal._waiters  # a timed-out waiter is forgotten


async def test_a_work_signal_tells_the_worker_it_lets_through_what_its_work_is() -> None:
    """Each wake-up carries its hint (the session whose message woke a worker), to the
    worker waiting or to the next one to wait, in the order they were set."""
    signal = WorkSignal()
    waiting = asyncio.create_task(signal.wake(5))
    await asyncio.sleep(0.01)
    signal.set(7)
    assert await waiting == (True, 7)
    signal.set(8)
    signal.set()  # no hint: the worker claims the longest-waiting session
    signal.set(9)
    assert [await signal.wake(0) for _ in range(3)] == [(True, 8), (True, None), (True, 9)]
    assert await signal.wake(0.01) == (False, None)
