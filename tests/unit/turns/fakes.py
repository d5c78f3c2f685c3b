"""A fake turn: a claimed session's pending messages, built in memory (no database)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from gateway.core.domain import ReplyTarget, SessionKey
from gateway.turns.stage import AgentRequest, TurnRun, as_context
from session_store.records import MessageRecord, PrefetchedContext, TurnClaim
from session_store.values import Role

KEY = SessionKey(platform="web", scope="local", chat_id="c1", thread_id="t1")


def target(thread: str = "t1") -> ReplyTarget:
    return ReplyTarget(platform="web", scope="local", chat_id="c1", thread_id=thread)


def message(
    seq: int,
    content: str,
    *,
    command: str | None = None,
    role: Role = "user",
    trigger: str | None = "answer",
    sender_id: str = "ann",
    thread: str = "t1",
    metadata: dict[str, Any] | None = None,
) -> MessageRecord:
    return MessageRecord(
        id=seq,
        session_id=1,
        seq_no=seq,
        role=role,
        content=content,
        sender_id=sender_id,
        sender_name=sender_id.title(),
        external_id=f"m{seq}",
        command=command,
        trigger=trigger,
        backfill=False,
        reply_target=target(thread),
        model=None,
        tokens_used=None,
        feedback=None,
        edited_at=None,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        metadata=metadata or {},
    )


def fake_turn(
    *pending: MessageRecord, done_seq: int = 0, context: PrefetchedContext | None = None
) -> TurnRun:
    """A turn as the scheduler builds it from a claim (``TurnScheduler._run_turn``)."""
    asks = [m for m in pending if m.role == "user" and m.trigger == "answer"]
    claim = TurnClaim(
        session_id=1,
        key=KEY,
        owner="owner-1",
        done_seq=done_seq,
        requested_seq=pending[-1].seq_no,
        selected_model=None,
        status="active",
        pending=tuple(pending),
        context=context,
    )
    return TurnRun(
        claim=claim,
        pending=pending,
        handled_seq=pending[-1].seq_no,
        asks=asks,
        questions=list(asks),
        request=AgentRequest(
            new_messages=[as_context(m) for m in pending if m.role == "user" and not m.command]
        ),
    )


def texts(turn: TurnRun) -> Sequence[str]:
    return [r.text for r in turn.replies]
