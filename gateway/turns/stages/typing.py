"""Typing: the platform's typing indicator while the agent runs a while.

Around the agent call only: shown after ``TYPING_DELAY`` (a quick answer arrives with its
indicator, and the indicator costs a platform call), renewed until the call ends, then
cleared. A streamed turn's renewals share the chat's pacing budget with its preview edits.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager

from gateway.core.lifecycle.guards import Deferred
from gateway.core.ports import Transport
from gateway.turns.stage import Stage, TurnRun
from gateway.turns.typing import Budget, hold_typing

#: seconds a turn runs before the typing indicator is shown
TYPING_DELAY = 0.25


class TypingStage(Stage):
    name = "typing"

    def __init__(
        self, transports: Mapping[str, Transport], *, budget: Budget, delay: float = TYPING_DELAY
    ) -> None:
        self._transports = transports
        #: the chat budget the preview edits draw on (``gateway.outbox.streaming.Streams.budget``)
        self._budget = budget
        self._delay = delay

    def around(self, turn: TurnRun) -> AbstractAsyncContextManager[None]:
        return self._held(turn)

    @contextlib.asynccontextmanager
    async def _held(self, turn: TurnRun) -> AsyncIterator[None]:
        streamed = turn.request.stream is not None
        # a timer until the delay is over: most answers come sooner, and start no task
        shown = Deferred(
            self._delay, lambda: self._keep(turn, streamed=streamed), "typing-indicator"
        )
        try:
            yield
        finally:
            await shown.stop()

    async def _keep(self, turn: TurnRun, *, streamed: bool) -> None:
        target = turn.target
        transport = self._transports.get(target.platform)
        if transport is not None:
            await hold_typing(transport, target, budget=self._budget if streamed else None)
