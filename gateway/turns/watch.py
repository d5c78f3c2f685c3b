"""What a running turn watches for while the agent writes: a stop (``/stop``, a stop
reaction), its question edited or deleted, or new messages that restart it; and the answer
a stopped run leaves (the text streamed so far, marked stopped, its model calls charged)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.agents.base import Turn
from gateway.core.domain import Reply
from gateway.core.errors import StoreError
from gateway.turns.stage import TurnRun, asks_for_answer
from session_store.store import Store

log = structlog.get_logger(__name__)

#: how often a running turn looks at its session row for a stop or a changed question
WATCH_SECONDS = 0.5


def watch_interval(poll_seconds: float) -> float:
    """How often a running turn's watch reads its session row."""
    return min(poll_seconds, WATCH_SECONDS)


#: the mark a stopped answer ends with
STOPPED_MARK = "(stopped)"


@dataclass(frozen=True, slots=True)
class Change:
    """What a running turn's watch saw: ``stop`` (``/stop`` at ``upto``, or a stop reaction),
    ``edit`` or ``delete`` of a question it answers, or ``new`` messages that restart it."""

    kind: str
    upto: int | None = None


async def watch_turn(
    store: Store,
    turn: TurnRun,
    *,
    poll_seconds: float,
    limit: int,
    restart_on_new: bool,
    revisable: bool,
    first: float | None = None,
) -> Change:
    """Returns once the running turn must stop or start over: a signal on its session
    row (a stop reaction; its question edited or deleted: ``Turns.signal_turn``, from
    any replica) or a new message (``/stop``; any question under ``restart``). Reads the
    row every ``WATCH_SECONDS`` while the model writes; a turn over sooner reads nothing.
    ``limit``: the new messages read at a time. ``first``: the wait before the first read
    (default: the interval)."""
    claim = turn.claim
    interval = watch_interval(poll_seconds)
    wait = interval if first is None else first
    seen = turn.handled_seq
    while True:
        await asyncio.sleep(wait)
        wait = interval
        try:
            found = await store.turns.turn_watch(claim.session_id)
            change = signalled(turn, found.signal, found.signal_seq, revisable=revisable)
            if change is not None and found.signal is not None:
                # taken once: the run that starts over must not see it again
                await store.turns.take_signal(
                    claim.session_id, claim.owner, found.signal, found.signal_seq
                )
                return change
            if found.requested_seq > seen:
                new = await store.sessions.delta(claim.session_id, turn.handled_seq, limit=limit)
                asking = [m for m in new if asks_for_answer(m)]
                stop = next((m for m in asking if m.command == "stop"), None)
                if stop is not None:
                    return Change("stop", upto=stop.seq_no)
                if restart_on_new and asking:
                    return Change("new")
                seen = found.requested_seq
        except StoreError as exc:
            log.debug("turn_watch_failed", error=str(exc))


def signalled(
    turn: TurnRun, signal: str | None, seq: int | None, *, revisable: bool
) -> Change | None:
    """The signal on the session row, when it concerns a message this run answers."""
    if signal is None or seq is None:
        return None
    if not turn.claim.done_seq < seq <= turn.handled_seq:
        return None  # another turn's, or a message queued after this run
    if signal == "stop":
        return Change("stop")
    return Change(signal) if revisable else None


def stopped_reply(turn: TurnRun, request: Turn, change: Change) -> Reply:
    """The answer of a stopped run: the text streamed so far, marked stopped, carrying
    the model calls made (and an estimate of the one cut short) for the usage ledger."""
    if change.upto is not None and change.upto > turn.handled_seq:
        turn.handled_seq = change.upto  # the /stop is handled by this answer
    turn.stopped = True
    written = turn.streamed() if turn.streamed is not None else ""
    calls: list[dict[str, Any]] = [*(request.spent or ()), *cut_short(turn, request)]
    text = f"{written.rstrip()}\n\n{STOPPED_MARK}" if written.strip() else STOPPED_MARK
    log.info("turn_stopped", streamed_chars=len(written), calls=len(calls))
    used = sum(
        int(c.get("prompt_tokens") or 0) + int(c.get("completion_tokens") or 0) for c in calls
    )
    return Reply(
        text=text,
        model=request.model,
        tokens_used=used or None,
        metadata={"stopped": True, "calls": calls},
    )


def cut_short(turn: TurnRun, request: Turn) -> list[dict[str, Any]]:
    """The model call a stop or a restart cut short, estimated (its usage never came): the
    prompt as estimated, the text streamed so far; nothing when no text was streamed (the run
    was between calls, or the agent does not stream)."""
    written = turn.streamed() if turn.streamed is not None else ""
    if not written.strip():
        return []
    return [
        {
            "model": request.model,
            "prompt_tokens": request.estimated_prompt_tokens or 0,
            "completion_tokens": max(1, len(written) // 4),
            "estimated": True,
        }
    ]
