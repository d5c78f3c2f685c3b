"""The store's tools area: reads the built-in tools make on behalf of the asker, and tool
approvals (``ApprovalRecord``) with the turns parked on them. Its SQL is ``tools.sql`` beside
it; the approval card's delivery row is written with the outbox's statement."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

import asyncpg

from session_store.records import SessionRecord
from session_store.repos.outbox import SQL as OUTBOX_SQL
from session_store.repos.sessions import SQL as SESSIONS_SQL
from session_store.rows import Column, or_empty, reader
from session_store.sql import load
from session_store.store import Store
from session_store.values import ApprovalStatus, ReplyTarget

SQL = load(__package__, "tools.sql", session_columns=SESSIONS_SQL.session_columns)


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


#: what ``ToolStore.park_turn`` did
ParkOutcome = Literal["parked", "decided", "lost"]

_session = reader(SessionRecord)
_approval = reader(ApprovalRecord)


class ToolStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._db = store.db

    async def asker_sessions(
        self, *, platform: str, scope: str, user_id: str, limit: int = 20
    ) -> list[SessionRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.asker_sessions, platform, scope, user_id, limit)
        return [_session(r) for r in rows]

    async def takes_part(self, session_id: int, *, platform: str, scope: str, user_id: str) -> bool:
        async with self._db.connection() as conn:
            found = await conn.fetchval(SQL.takes_part, session_id, platform, scope, user_id)
        return bool(found)

    # --- approvals ---------------------------------------------------------------------------

    async def open_approval(
        self,
        *,
        approval_id: str,
        session_id: int,
        idempotency_key: str,
        tool_name: str,
        arguments: Mapping[str, Any],
        owner: str,
        approvers: Sequence[str],
        target: ReplyTarget,
        expires_in: float,
    ) -> tuple[ApprovalRecord, bool]:
        """The request for ``idempotency_key``: a new one (``True``), or the one a previous
        run of the same turn made (``False``), with whatever was decided meanwhile."""
        async with self._db.transaction() as conn:
            status = await conn.execute(
                SQL.insert_approval,
                approval_id,
                session_id,
                idempotency_key,
                tool_name,
                dict(arguments),
                owner,
                list(approvers),
                target.to_json(),
                expires_in,
            )
            row = await conn.fetchrow(SQL.get_approval_by_key, idempotency_key)
        assert row is not None
        return _approval(row), status.endswith(" 1")

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.get_approval, approval_id)
        return None if row is None else _approval(row)

    async def approval_by_card(
        self, platform: str, platform_message_id: str
    ) -> ApprovalRecord | None:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.get_approval_by_card, platform, platform_message_id)
        return None if row is None else _approval(row)

    async def decide_approval(
        self, approval_id: str, *, version: int, status: ApprovalStatus, decided_by: str
    ) -> bool:
        """Compare-and-set on ``version``: ``False`` when someone decided (or it expired)
        first. A turn parked on the request is unparked in the same transaction."""
        async with self._db.transaction() as conn:
            found = await conn.fetchval(
                SQL.decide_approval, approval_id, version, status, decided_by
            )
            if found is not None:
                await self._unpark(conn, approval_id)
        return found is not None

    async def expire_approval(self, approval_id: str, *, version: int) -> bool:
        async with self._db.transaction() as conn:
            found = await conn.fetchval(SQL.expire_approval, approval_id, version)
            if found is not None:
                await self._unpark(conn, approval_id)
        return found is not None

    @staticmethod
    async def _unpark(conn: asyncpg.Connection, approval_id: str) -> None:
        # a statement of its own (see ``unpark_turn`` in ``tools.sql``): its snapshot sees a
        # park that committed while the decision waited for the request's row lock
        session_id = await conn.fetchval(SQL.approval_session, approval_id)
        await conn.execute(SQL.unpark_turn, session_id, approval_id)

    async def park_turn(
        self, *, session_id: int, owner: str, approval_id: str, handled_seq: int
    ) -> ParkOutcome:
        """Hand the session's lease back without finishing its turn, parked on the pending
        request ``approval_id`` (not claimed again until it is decided or expires).
        ``decided``: the request was decided (or ran out) meanwhile, nothing parked, the
        lease is still ours; ``lost``: the lease was taken over."""
        async with self._db.transaction() as conn:
            if await conn.fetchval(SQL.lock_pending_approval, approval_id) is None:
                return "decided"
            found = await conn.fetchval(SQL.park_turn, session_id, owner, approval_id, handled_seq)
        return "parked" if found is not None else "lost"

    async def unpark_strays(self) -> int:
        """Unpark sessions parked on a request that is no longer pending (a safety net)."""
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.unpark_strays)
        return len(rows)

    async def overdue_approvals(self, limit: int = 100) -> list[tuple[str, int]]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.overdue_approvals, limit)
        return [(r["id"], r["version"]) for r in rows]

    async def unretired_approvals(self, limit: int = 100) -> list[ApprovalRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.unretired_approvals, limit)
        return [_approval(r) for r in rows]

    async def mark_card_retired(self, approval_id: str) -> bool:
        """Claim the card's retirement; ``False`` if someone retired (or is retiring) it."""
        async with self._db.connection() as conn:
            return await conn.fetchval(SQL.mark_card_retired, approval_id) is not None

    async def unmark_card_retired(self, approval_id: str) -> None:
        """The platform call failed: let the sweeper try again."""
        async with self._db.connection() as conn:
            await conn.execute(SQL.unmark_card_retired, approval_id)

    async def queue_card(
        self,
        approval_id: str,
        *,
        session_id: int,
        text: str,
        target: ReplyTarget,
        metadata: Mapping[str, Any],
        traceparent: str | None = None,
    ) -> int | None:
        """Put the request's card in the outbox: a session message (seq-numbered, kept out
        of the agent's context) and its delivery row (an approval card part naming the
        request, sent in the trace ``traceparent`` names), in one transaction, once per
        request.
        Returns the message's seq, or ``None`` if the card was queued before."""
        async with self._db.transaction() as conn:
            # lock first, then look (two runs of one turn must not queue two cards)
            queued = await conn.fetchrow(SQL.lock_approval_card, approval_id)
            if queued is None or queued["card_message_id"] is not None:
                return None
            seq = await conn.fetchval(SQL.allocate_card_seq, session_id)
            message_id = await conn.fetchval(
                SQL.insert_card_message, session_id, seq, text, dict(metadata)
            )
            await conn.execute(SQL.set_card_message, approval_id, message_id)
            await conn.execute(
                OUTBOX_SQL.insert_card_delivery,
                message_id,
                session_id,
                seq,
                target.platform,
                target.to_json(),
                text,
                approval_id,
                traceparent,
            )
        return int(seq)

    async def approval_states(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Status, decider and tool of each request (for transcripts showing the cards)."""
        if not ids:
            return {}
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.approval_states, list(ids))
        return {
            r["id"]: {
                "id": r["id"],
                "status": r["status"],
                "decided_by": r["decided_by"],
                "tool": r["tool_name"],
            }
            for r in rows
        }
