from __future__ import annotations

import asyncio

from gateway.hub import KeyedLock


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
