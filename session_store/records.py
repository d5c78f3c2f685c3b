"""Typed rows handed to callers; each built from its record in one ``from_row``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gateway.domain import ReplyTarget, SessionKey


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    id: int
    key: SessionKey
    status: str
    title: str | None
    selected_model: str | None
    last_seq_no: int
    message_count: int
    created_at: datetime
    updated_at: datetime
    last_message_at: datetime | None
    metadata: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SessionRecord:
        return cls(
            id=row["id"],
            key=SessionKey(
                platform=row["platform"],
                scope=row["scope"],
                chat_id=row["chat_id"],
                thread_id=row["thread_id"],
            ),
            status=row["status"],
            title=row["title"],
            selected_model=row["selected_model"],
            last_seq_no=row["last_seq_no"],
            message_count=row["message_count"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_message_at=row["last_message_at"],
            metadata=row["metadata"] or {},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    id: int
    session_id: int
    seq_no: int
    role: str
    content: str
    sender_id: str | None = None
    sender_name: str | None = None
    external_id: str | None = None
    command: str | None = None
    trigger: str | None = None
    backfill: bool = False
    reply_target: ReplyTarget | None = None
    model: str | None = None
    tokens_used: int | None = None
    edited_at: datetime | None = None
    created_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MessageRecord:
        # every message query selects all these columns; indexing (not .get) is measurably
        # cheaper on the hot read path (50 rows per context read)
        target = row["reply_target"]
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            seq_no=row["seq_no"],
            role=row["role"],
            content=row["content"],
            sender_id=row["sender_id"],
            sender_name=row["sender_name"],
            external_id=row["external_id"],
            command=row["command"],
            trigger=row["trigger"],
            backfill=row["backfill"],
            reply_target=None if target is None else ReplyTarget.from_json(target),
            model=row["model"],
            tokens_used=row["tokens_used"],
            edited_at=row["edited_at"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliveryRecord:
    id: int
    message_id: int
    session_id: int
    seq_no: int
    part_no: int
    platform: str
    target: ReplyTarget
    content: str
    status: str
    attempts: int
    last_error: str | None
    platform_message_id: str | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DeliveryRecord:
        return cls(**cls.fields_of(row))

    @staticmethod
    def fields_of(row: Mapping[str, Any]) -> dict[str, Any]:
        """This record's fields from a row (shared with richer views of the same row)."""
        return {
            "id": row["id"],
            "message_id": row["message_id"],
            "session_id": row["session_id"],
            "seq_no": row["seq_no"],
            "part_no": row["part_no"],
            "platform": row["platform"],
            "target": ReplyTarget.from_json(row["target"]),
            "content": row["content"],
            "status": row["status"],
            "attempts": row["attempts"],
            "last_error": row["last_error"],
            "platform_message_id": row["platform_message_id"],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnClaim:
    """A session whose turn this worker now owns (``owner`` is the fencing token)."""

    session_id: int
    key: SessionKey
    owner: str
    done_seq: int
    requested_seq: int
    selected_model: str | None
    status: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestResult:
    status: str  # accepted | duplicate | ignored | rejected
    session_id: int | None = None
    message_id: int | None = None
    seq_no: int | None = None
    turn_requested: bool = False
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextRecord:
    """One message as the agent's context reads it (see ``queries.CONTEXT_NEWEST_FIRST``)."""

    id: int
    seq_no: int
    role: str
    content: str
    sender_id: str | None = None
    sender_name: str | None = None
    #: for replies: the newest seq the turn that wrote it had handled
    answers_seq: int | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tool_call_id: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ContextRecord:
        calls = row["tool_calls"]
        return cls(
            id=row["id"],
            seq_no=row["seq_no"],
            role=row["role"],
            content=row["content"],
            sender_id=row["sender_id"],
            sender_name=row["sender_name"],
            answers_seq=row["answers_seq"],
            tool_calls=tuple(c for c in calls if isinstance(c, Mapping))
            if isinstance(calls, list)
            else (),
            tool_call_id=row["tool_call_id"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRecord:
    """A rolling summary of a session's messages ``from_seq..to_seq``."""

    id: int
    session_id: int
    from_seq: int
    to_seq: int
    content: str
    model: str | None
    model_written: bool
    created_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SummaryRecord:
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            from_seq=row["from_seq"],
            to_seq=row["to_seq"],
            content=row["content"],
            model=row["model"],
            model_written=row["model_written"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnState:
    """What a turn needs besides the transcript (see ``queries.TURN_STATE``)."""

    session_metadata: Mapping[str, Any]
    title: str | None
    selected_model: str | None
    user_model: str | None
    #: metadata of the message being answered (chat/channel names for the system prompt)
    place: Mapping[str, Any]
    summary: SummaryRecord | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], session_id: int) -> TurnState:
        summary = None
        if row["summary_id"] is not None:
            summary = SummaryRecord(
                id=row["summary_id"],
                session_id=session_id,
                from_seq=row["from_seq"],
                to_seq=row["to_seq"],
                content=row["summary_content"],
                model=row["summary_model"],
                model_written=row["model_written"],
                created_at=row["summary_created_at"],
            )
        return cls(
            session_metadata=row["metadata"] or {},
            title=row["title"],
            selected_model=row["selected_model"],
            user_model=row["user_model"],
            place=row["place"] or {},
            summary=summary,
        )
