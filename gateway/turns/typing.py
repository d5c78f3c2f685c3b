"""Typing indicators held like a lease: shown at once, renewed by a heartbeat before the
platform lets them expire, and always cleared when the turn ends (answer, failure or
cancellation). A failing indicator is cosmetic and never fails the turn.

Each transport says how often its indicator must be renewed (``typing_interval``: Telegram's
chat action lasts 5 s, Slack's assistant thread status 2 min) and how to clear it
(``clear_typing``: a no-op where the indicator ends by itself or with the reply)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from gateway.core.domain import ReplyTarget
from gateway.core.ports import Transport
from gateway.outbox.pacing import Rules, pace_rules

log = structlog.get_logger(__name__)

#: the clear is best effort: it must not hold the turn's reply back for long
CLEAR_TIMEOUT = 2.0


#: a shared pacing budget (``Streams.budget``): rules, longest acceptable wait -> the wait
Budget = Callable[[Rules, float], Awaitable[float]]
#: a renewal waits at most this long for the budget; later it is skipped (cosmetic)
RENEWAL_MAX_WAIT = 1.0


async def hold_typing(
    transport: Transport, target: ReplyTarget, *, budget: Budget | None = None
) -> None:
    """Show ``transport``'s typing indicator in ``target``'s thread until cancelled, renewing
    it every ``transport.typing_interval`` seconds; clear it on the way out. With ``budget``
    (a streamed turn) the renewals draw on the chat's pacing budget shared by every replica
    with the preview edits; the first indicator never waits for it."""
    first = True
    try:
        while True:
            try:
                wait = 0.0
                if budget is not None and not first:
                    wait = await budget(pace_rules(transport, target), RENEWAL_MAX_WAIT)
                    if wait <= RENEWAL_MAX_WAIT:
                        await asyncio.sleep(wait)
                if wait <= RENEWAL_MAX_WAIT:
                    await transport.typing(target)
            except Exception as exc:  # noqa: BLE001 - cosmetic: never fail the turn for it
                log.debug("typing_failed", platform=target.platform, error=str(exc))
            first = False
            await asyncio.sleep(transport.typing_interval)
    finally:
        try:
            await asyncio.wait_for(transport.clear_typing(target), CLEAR_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - cosmetic, as above
            log.debug("typing_clear_failed", platform=target.platform, error=str(exc))
