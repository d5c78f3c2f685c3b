"""Running the composition root's long-lived loops: each group of loop bodies is one task whose
loops all run under the supervisor, and each group is stopped by its own event. Stopping never
raises because a loop died earlier: shutdown must go on."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from gateway.core.lifecycle.supervisor import Beat, Supervisor

log = structlog.get_logger(__name__)

#: a loop's body: ``body(stopping, beat)`` runs until ``stopping`` is set
LoopFn = Callable[[asyncio.Event, Beat], Awaitable[None]]
#: one supervised loop: (name, body(stopping, beat), stall_after or None, required for /readyz)
LoopBody = tuple[str, Any, float | None, bool]


def supervised(
    supervisor: Supervisor,
    name: str,
    bodies: Sequence[LoopBody],
    stopping: asyncio.Event,
) -> asyncio.Task[None]:
    """One task running ``bodies`` (name, body(stopping, beat), stall_after, required),
    each under the supervisor."""

    async def run_all() -> None:
        await asyncio.gather(
            *(
                supervisor.supervise(
                    loop,
                    functools.partial(body, stopping),
                    stopping=stopping,
                    stall_after=stall,
                    required=required,
                )
                for loop, body, stall, required in bodies
            )
        )

    return asyncio.create_task(run_all(), name=name)


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for it; an exception it died of earlier is logged, never
    raised (shutdown must go on)."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        log.exception("task_failed_before_stop", task=task.get_name())


async def drain(task: asyncio.Task[None] | None, seconds: float, failed: str) -> None:
    """Let ``task`` finish by itself for up to ``seconds`` (its stop event is set), then
    cancel it; an exception it ends with is logged as ``failed``."""
    if task is None:
        return
    try:
        await asyncio.wait_for(asyncio.shield(task), seconds)
    except TimeoutError:
        await cancel(task)
    except Exception:
        log.exception(failed)


def beating(run: Callable[[asyncio.Event], Awaitable[None]]) -> LoopFn:
    """A loop body for ``run(stopping)``, a loop that keeps itself going until stopped: one
    beat when it starts (its health is its being up, not its progress)."""

    async def body(stopping: asyncio.Event, beat: Beat) -> None:
        beat()
        await run(stopping)

    return body
