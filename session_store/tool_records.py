"""Records of the tools area (issue 14)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from session_store.values import ApprovalStatus, ReplyTarget


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRecord:
    id: str
    version: int
    session_id: int
    idempotency_key: str
    tool_name: str
    arguments: Mapping[str, Any]
    #: ``platform:user`` of the person who asked
    owner: str
    approvers: tuple[str, ...]
    status: ApprovalStatus
    target: ReplyTarget
    card_message_id: int | None
    card_platform_message_id: str | None
    card_retired: bool
    decided_by: str | None
    decided_at: datetime | None
    created_at: datetime
    expires_at: datetime
    #: pending, but past ``expires_at`` (by the database's clock)
    overdue: bool

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ApprovalRecord:
        return cls(
            id=row["id"],
            version=row["version"],
            session_id=row["session_id"],
            idempotency_key=row["idempotency_key"],
            tool_name=row["tool_name"],
            arguments=row["arguments"] or {},
            owner=row["owner"],
            approvers=tuple(row["approvers"] or ()),
            status=row["status"],
            target=ReplyTarget.from_json(row["target"]),
            card_message_id=row["card_message_id"],
            card_platform_message_id=row["card_platform_message_id"],
            card_retired=row["card_retired"],
            decided_by=row["decided_by"],
            decided_at=row["decided_at"],
            created_at=row["created_at"],
            expires_at=row["expires_at"],
            overdue=row["overdue"],
        )
