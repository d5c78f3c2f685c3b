"""A session's turn: claiming it under a lease fenced by an owner token (with its pending
messages and context prefetched in the same round trip), renewing and releasing the lease,
and what a turn reads besides its messages. Finishing a turn writes the outbox, so it lives
with the outbox (``repos.outbox``)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from session_store.db import Database
from session_store.errors import LeaseLost, SessionNotFound
from session_store.records import (
    ContextRecord,
    MessageRecord,
    PrefetchedContext,
    TurnClaim,
    TurnSignal,
    TurnState,
    TurnWatch,
    context_from_row,
    context_from_values,
)
from session_store.repos.liveness import dead_process
from session_store.repos.sessions import SQL as SESSIONS_SQL
from session_store.rows import Column, or_empty, reader
from session_store.sql import load
from session_store.values import key_from_row

SQL = load(
    __package__,
    "turns.sql",
    message_columns=SESSIONS_SQL.message_columns,
    pending_columns=SESSIONS_SQL.pending_columns,
    # the liveness rule, shared with the outbox's recovery
    dead_turn_process=dead_process("turn_process"),
)

_message = reader(MessageRecord)
_state = reader(TurnState)
#: the turn's state inside ``claim_turn_context``'s row, where the session's own columns are
#: renamed (the pending messages' columns share the row)
_claimed_state = reader(
    TurnState,
    columns={
        **TurnState.row_columns,
        "session_metadata": Column(name="session_metadata", convert=or_empty),
        "title": Column(name="session_title"),
    },
)


class Turns:
    def __init__(self, db: Database) -> None:
        self.db = db
        #: this process's id while it holds its liveness lock (``Store.process_id``)
        self.process_id: int | None = None

    async def claim_turn(
        self,
        *,
        lease_seconds: float,
        platforms: Sequence[str] | None = None,
        with_pending: int = 0,
        context_page: int = 0,
        prefer: int | None = None,
    ) -> TurnClaim | None:
        """Claim one session whose turn is due: ``prefer`` (a session id) when it is, else
        the one waiting longest. With ``with_pending`` its first unanswered
        messages (up to that many) come in the same round trip, as ``TurnClaim.pending``
        (None when the statement's snapshot missed the newest: read ``delta`` then); with
        ``context_page`` also the turn's state and newest context page
        (``TurnClaim.context``)."""
        owner = str(uuid.uuid4())
        rows = await self._claim(
            owner, lease_seconds, platforms, with_pending, context_page, prefer
        )
        if not rows:
            return None
        row = rows[0]
        pending: tuple[MessageRecord, ...] | None = None
        context: PrefetchedContext | None = None
        if with_pending > 0:
            found = tuple(_message(r) for r in rows if r["id"] is not None)
            complete = bool(found) and found[-1].seq_no >= row["turn_requested_seq"]
            pending = found if complete else None
            if complete and context_page > 0 and row["question_seq"] is not None:
                context = _prefetched(row, context_page)
        return TurnClaim(
            session_id=row["claim_session_id"] if with_pending > 0 else row["id"],
            key=key_from_row(row),
            owner=owner,
            done_seq=row["turn_done_seq"],
            requested_seq=row["turn_requested_seq"],
            selected_model=row["selected_model"],
            status=row["status"],
            pending=pending,
            context=context,
            parked_seq=row["turn_parked_seq"],
        )

    async def _claim(
        self,
        owner: str,
        lease_seconds: float,
        platforms: Sequence[str] | None,
        with_pending: int,
        context_page: int,
        prefer: int | None,
    ) -> list[Any]:
        plats = None if platforms is None else list(platforms)
        args = (owner, lease_seconds, plats, self.process_id, prefer)
        async with self.db.connection() as conn:
            if with_pending <= 0:
                row = await conn.fetchrow(SQL.claim_turn, *args)
                return [] if row is None else [row]
            if context_page <= 0:
                return list(await conn.fetch(SQL.claim_turn_pending, *args, with_pending))
            return list(await conn.fetch(SQL.claim_turn_context, *args, with_pending, context_page))

    async def renew_turn(self, claim: TurnClaim, *, lease_seconds: float) -> None:
        async with self.db.connection() as conn:
            ok = await conn.fetchval(SQL.renew_turn, claim.session_id, claim.owner, lease_seconds)
        if ok is None:
            raise LeaseLost(f"turn lease of session {claim.session_id} was taken over")

    async def release_turn(self, claim: TurnClaim) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.release_turn, claim.session_id, claim.owner)

    async def turn_requested_seq(self, session_id: int) -> int:
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.turn_requested_seq, session_id)
        if value is None:
            raise SessionNotFound(f"no session {session_id}")
        return int(value)

    # --- a running turn told to stop or start over -------------------------------------

    async def turn_watch(self, session_id: int) -> TurnWatch:
        """What a running turn looks at while the model writes: the newest seq that asked
        for a turn and the signal on the session (``signal_turn``)."""
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.turn_watch, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return TurnWatch(
            requested_seq=int(row["turn_requested_seq"]),
            signal=row["turn_signal"],
            signal_seq=row["turn_signal_seq"],
        )

    async def signal_turn(
        self, session_id: int, signal: TurnSignal, seq_no: int | None = None
    ) -> bool:
        """Tell the session's running turn (on whichever replica) to stop, or that message
        ``seq_no`` was edited or deleted. False: no turn runs there (nothing to tell)."""
        async with self.db.connection() as conn:
            found = await conn.fetchval(SQL.signal_turn, session_id, signal, seq_no)
        return found is not None

    async def take_signal(
        self, session_id: int, owner: str, signal: TurnSignal, seq_no: int | None
    ) -> None:
        """The running turn took ``signal``: cleared, unless a newer one replaced it."""
        async with self.db.connection() as conn:
            await conn.execute(SQL.take_signal, session_id, owner, signal, seq_no)

    async def revisions(self, session_id: int, after_seq: int) -> dict[int, tuple[str, str | None]]:
        """``{seq_no: (kind, text)}``: the newest edit (``edit``, its text) or the deletion
        (``delete``) of each message after ``after_seq``."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.revisions, session_id, after_seq)
        return {int(r["seq_no"]): (str(r["kind"]), r["content"]) for r in rows}

    async def session_of_answer(self, platform: str, chat_id: str, message_id: str) -> int | None:
        """The session whose answer (sent, or a preview while it streams) is ``message_id``."""
        async with self.db.connection() as conn:
            value = await conn.fetchval(SQL.session_of_answer, platform, chat_id, message_id)
        return None if value is None else int(value)

    # --- what a turn reads besides its messages ------------------------------------------

    async def turn_state(
        self,
        session_id: int,
        *,
        question_seq: int,
        upto_seq: int,
        user_platform: str,
        user_id: str | None,
    ) -> TurnState:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.turn_state, session_id, question_seq, user_platform, user_id, upto_seq
            )
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return _state(row)

    async def context_page(
        self,
        session_id: int,
        *,
        after_seq: int,
        upto_seq: int,
        limit: int,
        newest_first: bool = True,
    ) -> list[ContextRecord]:
        """Context messages with ``after_seq < seq_no <= upto_seq``, newest or oldest first."""
        sql = SQL.context_newest_first if newest_first else SQL.context_oldest_first
        async with self.db.connection() as conn:
            rows = await conn.fetch(sql, session_id, after_seq, upto_seq, limit)
        return [context_from_values(r) for r in rows]

    async def set_model_choice(
        self, session_id: int, *, platform: str, user_id: str | None, model: str
    ) -> None:
        """``/model NAME``: this session's model, and this person's choice for new ones."""
        async with self.db.transaction() as conn:
            await conn.execute(SQL.set_session_model, session_id, model)
            if user_id:
                await conn.execute(SQL.set_user_model, platform, user_id, model)
                scope = await conn.fetchval(SQL.session_scope, session_id)
                await conn.execute(SQL.set_person_model, f"{platform}:{scope}:{user_id}", model)


def _prefetched(row: Mapping[str, Any], limit: int) -> PrefetchedContext:
    """The turn's state and newest context page, read with its claim."""
    return PrefetchedContext(
        question_seq=row["question_seq"],
        upto_seq=row["upto_seq"],
        state=_claimed_state(row),
        after_seq=row["summary_to_seq"] or 0,
        limit=limit,
        page=tuple(context_from_row(r) for r in row["context_page"] or ()),
    )
