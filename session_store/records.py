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
        target = row.get("reply_target")
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            seq_no=row["seq_no"],
            role=row["role"],
            content=row["content"],
            sender_id=row.get("sender_id"),
            sender_name=row.get("sender_name"),
            external_id=row.get("external_id"),
            command=row.get("command"),
            trigger=row.get("trigger"),
            backfill=bool(row.get("backfill", False)),
            reply_target=None if target is None else ReplyTarget.from_json(target),
            model=row.get("model"),
            tokens_used=row.get("tokens_used"),
            edited_at=row.get("edited_at"),
            created_at=row.get("created_at"),
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
        return cls(
            id=row["id"],
            message_id=row["message_id"],
            session_id=row["session_id"],
            seq_no=row["seq_no"],
            part_no=row["part_no"],
            platform=row["platform"],
            target=ReplyTarget.from_json(row["target"]),
            content=row["content"],
            status=row["status"],
            attempts=row["attempts"],
            last_error=row["last_error"],
            platform_message_id=row["platform_message_id"],
        )


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
