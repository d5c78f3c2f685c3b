"""Records of the tools area."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from session_store.rows import Column, or_empty
from session_store.values import ApprovalStatus, ReplyTarget


def _approvers(value: list[str] | None) -> tuple[str, ...]:
    return tuple(value or ())


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

    row_columns: ClassVar[Mapping[str, Column]] = {
        "arguments": Column(convert=or_empty),
        "approvers": Column(convert=_approvers),
        "target": Column(convert=ReplyTarget.from_json),
    }
