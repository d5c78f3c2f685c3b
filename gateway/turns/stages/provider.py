"""Provider waits in the open: a turn that waits on a struggling model says so in its thread.

Before the agent: gives it a ``ProviderProgress`` (``Turn.progress``) to report its requests,
retries and the first token. Around the agent call: once the provider has kept the turn
waiting ``AGENT_STATUS_AFTER_SECONDS`` (a request with nothing back yet, or a wait before a
retry), the thread gets ONE status line, "the model is busy, retrying in 20 s". The wait is
counted from the first request the agent tells of: a model asked while a fallback is left is
not told, so the line comes only when no model could answer soon. It shows in the streamed
preview where the turn streams (the answer then replaces it), else as
a short message of its own (the answer follows it). The typing indicator
(``gateway.turns.stages.typing``) is held meanwhile. An answer that is streaming is never
interrupted by a status line.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager

import structlog

from gateway.core.errors import DeliveryError
from gateway.core.lifecycle.guards import Deferred
from gateway.core.ports import Transport
from gateway.turns.stage import Answer, Slot, Stage, TurnRun

log = structlog.get_logger(__name__)

#: seconds a turn waits on the provider before its thread is told
STATUS_AFTER = 10.0

_WHY = {
    "rate_limited": "the model is busy",
    "unavailable": "the model is unavailable",
    "timed_out": "the model is slow to answer",
}
ASKING = "still waiting for the model…"


def status_line(cause: str | None, retry_in: float | None) -> str:
    """``the model is busy, retrying in 20 s``; ``..., trying again…`` once the retry is on
    its way; ``still waiting for the model…`` for a slow first answer."""
    if cause is None:
        return ASKING
    why = _WHY.get(cause, "the model is busy")
    if retry_in is None:
        return f"{why}, trying again…"
    return f"{why}, retrying in {max(1, math.ceil(retry_in))} s"


class StatusNotice:
    """One turn's ``ProviderProgress``: follows the agent's requests and shows the status
    line once."""

    def __init__(self) -> None:
        self.state = "idle"
        self.cause: str | None = None
        self.retry_at: float | None = None
        self.shown: str | None = None
        #: when the provider began to keep the turn waiting (the first request the agent
        #: told of: a model asked while another is left to ask is not told)
        self.since: float | None = None
        self._changed = asyncio.Event()

    def _begun(self) -> None:
        if self.since is None:
            self.since = time.monotonic()

    def asking(self, model: str) -> None:
        self._begun()
        self.state = "asking"
        self._changed.set()

    def waiting(self, cause: str, seconds: float) -> None:
        self._begun()
        self.state, self.cause = "waiting", cause
        self.retry_at = time.monotonic() + seconds
        self._changed.set()

    def answering(self) -> None:
        self.state = "answering"
        self._changed.set()

    def line(self) -> str | None:
        """The status line for now, or None while nothing waits on the provider."""
        if self.state == "waiting":
            return status_line(self.cause, (self.retry_at or 0) - time.monotonic())
        if self.state == "asking":
            return status_line(self.cause, None)
        return None

    async def next_change(self) -> None:
        await self._changed.wait()
        self._changed.clear()


_NOTICE: Slot[StatusNotice] = Slot("provider_status")


class ProviderStatusStage(Stage):
    name = "provider_status"

    def __init__(self, transports: Mapping[str, Transport], *, after: float = STATUS_AFTER):
        self._transports = transports
        self._after = after

    async def before(self, turn: TurnRun) -> Answer | None:
        notice = StatusNotice()
        turn.put(_NOTICE, notice)
        turn.request.progress = notice
        return None

    def around(self, turn: TurnRun) -> AbstractAsyncContextManager[None]:
        return self._held(turn)

    @contextlib.asynccontextmanager
    async def _held(self, turn: TurnRun) -> AsyncIterator[None]:
        notice = turn.get(_NOTICE)
        if notice is None:
            yield
            return
        # nothing can be shown before ``after`` (the provider's wait begins inside this
        # block): until then a timer, and a turn answered sooner starts no task
        watch = Deferred(self._after, lambda: self._watch(turn, notice), "provider-status")
        try:
            yield
        finally:
            await watch.stop()

    async def _watch(self, turn: TurnRun, notice: StatusNotice) -> None:
        while True:
            line = notice.line()
            if line is not None and notice.since is not None:
                due = notice.since + self._after - time.monotonic()
                if due <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(notice.next_change(), due)
                continue
            await notice.next_change()
        notice.shown = line
        log.info("provider_status_shown", line=line)
        stream = turn.request.stream
        if stream is not None:
            stream.status(line)  # shown while the preview has no answer text
            return
        transport = self._transports.get(turn.target.platform)
        if transport is None:
            return
        key = f"status:{turn.claim.session_id}:{turn.handled_seq}"
        try:
            await transport.send(turn.target, line, idempotency_key=key)
        except DeliveryError as exc:  # cosmetic: the answer or the apology still comes
            log.info("provider_status_failed", error=str(exc))
