"""The operator surface's reads and writes: sessions with everything attached to them,
full-text search, the outbox, dead letters, and the super-session writes the MCP tools make
(participant messages, checkpoints, summaries, artifacts, read cursors).

It runs on the ``Store``'s database (its one error boundary), so callers still never see SQL,
driver records, or driver errors. Its SQL is ``operator.sql`` beside it; the outbox's
statements it runs are the outbox's (``repos/outbox.sql``). Sessions and transcripts
are read through the ``Store``'s own methods: one query per concept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, NoReturn, get_args

import asyncpg

from session_store import estimates
from session_store.errors import RequestError, SessionNotFound
from session_store.estimates import capped_count, planner_rows
from session_store.records import (
    Artifact,
    Checkpoint,
    Counts,
    DeliveryRecord,
    InboundEvent,
    Link,
    MessageRecord,
    Participant,
    SearchHit,
    SessionDetail,
    SessionRecord,
    SummaryRecord,
)
from session_store.repos.outbox import SQL as OUTBOX_SQL
from session_store.repos.outbox import delivery_from_row, delivery_status_counts
from session_store.repos.sessions import SQL as SESSIONS_SQL
from session_store.repos.summaries import SQL as SUMMARIES_SQL
from session_store.rows import reader
from session_store.sql import load
from session_store.store import Store
from session_store.values import (
    DeliveryStatus,
    InboundStatus,
    MessageKind,
    ReplyTarget,
    Role,
    SessionKey,
)

SQL = load(
    __package__,
    "operator.sql",
    session_columns=SESSIONS_SQL.session_columns,
    message_columns=SESSIONS_SQL.message_columns,
)

#: up to this many matching messages, a cross-session search sorts them all (see
#: ``search_all_count`` in ``operator.sql``)
FEW_MATCHES = 5000

_session = reader(SessionRecord)
_message = reader(MessageRecord)
_summary = reader(SummaryRecord)
_participant = reader(Participant)
_checkpoint = reader(Checkpoint)
_link = reader(Link)

# what a session link may point at, and how the session relates to it (the table's checks)
LinkType = Literal["law", "doc", "task", "collection", "issue", "report", "artifact"]
LinkRelation = Literal["input", "evidence", "output", "related", "supersedes"]
LINK_TYPES: tuple[str, ...] = get_args(LinkType)
LINK_RELATIONS: tuple[str, ...] = get_args(LinkRelation)
_artifact = reader(Artifact)
_inbound_event = reader(InboundEvent)
_search_hit = reader(SearchHit)


async def _session_counts(conn: asyncpg.Connection) -> tuple[dict[str, int], tuple[str, ...]]:
    """Active and closed sessions, and which of the two are estimates."""
    row = await conn.fetchrow(SQL.session_counts, estimates.EXACT_UP_TO + 1)
    assert row is not None
    active, total = int(row["active"]), int(row["total"])
    estimated: tuple[str, ...] = ()
    if active > estimates.EXACT_UP_TO:
        active = max(active, await planner_rows(conn, SQL.active_sessions))
        estimated += ("sessions.active",)
    if total <= estimates.EXACT_UP_TO:
        closed = total - active
    else:
        closed = await planner_rows(conn, SQL.closed_sessions)
        estimated += ("sessions.closed",)
    return {"active": active, "closed": closed}, estimated


class OperatorStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._db = store.db

    # --- sessions ------------------------------------------------------------------------

    async def get_session(self, session_id: int) -> SessionRecord:
        return await self.store.sessions.get_session(session_id)

    async def session_detail(self, session_id: int) -> SessionDetail:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SESSIONS_SQL.get_session, session_id)
            if row is None:
                raise SessionNotFound(f"no session {session_id}")
            participants = await conn.fetch(SQL.participants, session_id)
            checkpoints = await conn.fetch(SQL.checkpoints, session_id)
            links = await conn.fetch(SQL.links, session_id)
            summaries = await conn.fetch(SUMMARIES_SQL.list_summaries, session_id)
            artifacts = await conn.fetch(SQL.artifacts, session_id)
            deliveries = await conn.fetch(OUTBOX_SQL.session_delivery_counts, session_id)
        return SessionDetail(
            session=_session(row),
            participants=tuple(_participant(r) for r in participants),
            checkpoints=tuple(_checkpoint(r) for r in checkpoints),
            links=tuple(_link(r) for r in links),
            summaries=tuple(_summary(r) for r in reversed(summaries)),
            artifacts=tuple(_artifact(r) for r in artifacts),
            deliveries={r["status"]: r["n"] for r in deliveries},
        )

    async def active_session_count(self) -> int:
        """Exact up to ``estimates.EXACT_UP_TO``, the planner's estimate past it."""
        async with self._db.connection() as conn:
            count, _ = await capped_count(conn, SQL.active_session_count, SQL.active_sessions)
        return count

    async def counts(self) -> Counts:
        """The live counts, flat in the size of the database: what grows with it (sent
        deliveries, sessions) is counted up to ``estimates.EXACT_UP_TO`` and estimated past
        it, and named in ``approximate``."""
        async with self._db.connection() as conn:
            sessions, approximate = await _session_counts(conn)
            deliveries, sent_estimated = await delivery_status_counts(conn)
            inbound = await conn.fetch(SQL.inbound_counts)
            oldest = await conn.fetchval(OUTBOX_SQL.oldest_pending_age)
        return Counts(
            sessions=sessions,
            deliveries=deliveries,
            inbound={"rejected": 0, "ignored": 0} | {r["status"]: r["n"] for r in inbound},
            oldest_pending_delivery_seconds=None if oldest is None else float(oldest),
            approximate=approximate + (("deliveries.sent",) if sent_estimated else ()),
        )

    # --- transcript ----------------------------------------------------------------------

    async def search(
        self,
        query: str,
        *,
        session_id: int | None = None,
        platform: str | None = None,
        before: int | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Full-text search, newest first. Within a session ``before`` is a seq number;
        across sessions it is a message id."""
        # Planned for the words searched every time: prepared (asyncpg keeps them), these
        # statements went to a generic plan after five runs, which cannot tell a rare word
        # from one in every message and read a common word's whole GIN posting list: 244 ms
        # at 1M messages, 36x the cost at 10k (``python -m benchmarks --only scale``).
        async with self._db.custom_plans() as conn:
            if session_id is not None:
                rows = await conn.fetch(SQL.search_session, session_id, query, before, limit)
            else:
                matches = await conn.fetchval(SQL.search_all_count, query, before, FEW_MATCHES + 1)
                sql = SQL.search_all_few if matches <= FEW_MATCHES else SQL.search_all_many
                rows = await conn.fetch(sql, query, platform, before, limit)
        return [_search_hit(r) for r in rows]

    # --- outbox and inbox ----------------------------------------------------------------

    async def list_deliveries(
        self,
        *,
        status: DeliveryStatus | None = None,
        platform: str | None = None,
        session_id: int | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[DeliveryRecord]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(
                OUTBOX_SQL.list_deliveries, status, platform, session_id, before_id, limit
            )
        return [delivery_from_row(r) for r in rows]

    async def get_delivery(self, delivery_id: int) -> DeliveryRecord:
        async with self._db.connection() as conn:
            row = await conn.fetchrow(OUTBOX_SQL.get_delivery, delivery_id)
        if row is None:
            raise RequestError(f"no delivery {delivery_id}", status=404, title="Not found")
        return delivery_from_row(row)

    async def retry_delivery(self, delivery_id: int) -> DeliveryRecord:
        """Put a failed delivery back in the outbox (same row, same stored target)."""
        current = await self.get_delivery(delivery_id)
        if not await self.store.outbox.retry_failed_delivery(delivery_id):
            raise RequestError(
                f"delivery {delivery_id} is {current.status}; only failed deliveries can be "
                "retried",
                status=409,
                title="Conflict",
            )
        return await self.get_delivery(delivery_id)

    async def inbound_events(
        self,
        *,
        status: InboundStatus = "rejected",
        platform: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[InboundEvent]:
        async with self._db.connection() as conn:
            rows = await conn.fetch(SQL.list_inbound_events, status, platform, before_id, limit)
        return [_inbound_event(r) for r in rows]

    async def inbound_event(self, event_id: int) -> InboundEvent | None:
        """One rejected or ignored inbound event, with its raw payload."""
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.get_inbound_event, event_id)
        return None if row is None else _inbound_event(row)

    # --- super-session writes ------------------------------------------------------------

    async def append_message(
        self,
        session_id: int,
        *,
        participant: str,
        content: str,
        role: Role = "assistant",
        model: str | None = None,
        tokens_used: int | None = None,
        parts: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
        kind: MessageKind = "chat",
        importance: int = 0,
    ) -> MessageRecord:
        """Append a participant's message to an active session in one transaction. With
        ``parts`` it is also put in the outbox, one delivery row per part, carrying the target
        stored on the session's newest user message, so the delivery worker sends it to that
        exact thread. The author's read cursor moves past its own message."""
        async with self._db.transaction() as conn:
            target_json = None
            if parts is not None:
                target_json = await conn.fetchval(SQL.latest_user_target, session_id)
            seq = await conn.fetchval(SQL.allocate_seq, session_id)
            if seq is None:
                await self._raise_not_active(conn, session_id)
            if parts is not None and target_json is None:
                raise RequestError(
                    f"session {session_id} has no inbound message with a reply target, so there "
                    "is no thread to deliver to; append without delivery instead",
                    status=409,
                    title="Conflict",
                )
            row = await conn.fetchrow(
                SQL.insert_participant_message,
                session_id,
                seq,
                role,
                participant,
                content,
                model,
                tokens_used,
                {**(metadata or {}), "participant": participant},
                kind,
                importance,
            )
            assert row is not None
            message = _message(row)
            if parts and target_json is not None:
                target = ReplyTarget.from_json(target_json)
                await conn.execute(
                    OUTBOX_SQL.insert_deliveries,
                    session_id,
                    target.platform,
                    target.to_json(),
                    [message.id] * len(parts),
                    [seq] * len(parts),
                    list(range(1, len(parts) + 1)),
                    list(parts),
                    ["text"] * len(parts),
                    [{"v": 1}] * len(parts),
                    [None] * len(parts),
                )
            await conn.execute(
                SQL.upsert_participant, session_id, participant, "agent", participant, seq
            )
            if not parts:
                return message
            drows = await conn.fetch(OUTBOX_SQL.deliveries_of_messages, [message.id])
        return replace(message, deliveries=tuple(delivery_from_row(r) for r in drows))

    async def mark_read(
        self, session_id: int, participant: str, *, seq_no: int | None = None
    ) -> Participant:
        """Move ``participant``'s read cursor to ``seq_no`` (default: the newest message);
        it never moves backwards."""
        session = await self.get_session(session_id)
        seq = session.last_seq_no if seq_no is None else seq_no
        if seq > session.last_seq_no:
            raise RequestError(
                f"seq_no {seq} is past the session's last message ({session.last_seq_no})"
            )
        async with self._db.connection() as conn:
            row = await conn.fetchrow(
                SQL.upsert_participant, session_id, participant, "agent", participant, seq
            )
        assert row is not None
        return _participant(row)

    async def update_checkpoint(
        self,
        session_id: int,
        *,
        name: str,
        status: str,
        seq_no: int | None = None,
        detail: str | None = None,
    ) -> Checkpoint:
        session = await self.get_session(session_id)
        _check_seq(seq_no, session)
        async with self._db.connection() as conn:
            row = await conn.fetchrow(
                SQL.upsert_checkpoint, session_id, name, status, seq_no, detail
            )
        assert row is not None
        return _checkpoint(row)

    async def create_summary(
        self,
        session_id: int,
        *,
        from_seq: int,
        to_seq: int,
        content: str,
        model: str | None = None,
        model_written: bool = True,
    ) -> SummaryRecord:
        session = await self.get_session(session_id)
        if from_seq > to_seq:
            raise RequestError(f"from_seq ({from_seq}) is after to_seq ({to_seq})")
        _check_seq(to_seq, session)
        async with self._db.connection() as conn:
            row = await conn.fetchrow(
                SUMMARIES_SQL.insert_summary,
                session_id,
                from_seq,
                to_seq,
                content,
                model,
                model_written,
            )
        assert row is not None
        return _summary(row)

    async def add_link(
        self, session_id: int, *, link_type: str, target_ref: str, relation: str
    ) -> Link:
        """Link the session to what it used, produced or relates to (a law, a document, a
        task, ...). 404 for an unknown session, 422 for a type or relation not known."""
        if link_type not in LINK_TYPES:
            raise RequestError(
                f"unknown link_type {link_type!r}: one of {', '.join(LINK_TYPES)}", status=422
            )
        if relation not in LINK_RELATIONS:
            raise RequestError(
                f"unknown relation {relation!r}: one of {', '.join(LINK_RELATIONS)}", status=422
            )
        if not target_ref.strip():
            raise RequestError("target_ref is empty", status=422)
        await self.get_session(session_id)
        async with self._db.connection() as conn:
            row = await conn.fetchrow(SQL.add_link, session_id, link_type, target_ref, relation)
        assert row is not None
        return _link(row)

    async def add_artifact(
        self,
        session_id: int,
        *,
        kind: str,
        name: str,
        uri: str | None = None,
        content: str | None = None,
        seq_no: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Artifact:
        session = await self.get_session(session_id)
        _check_seq(seq_no, session)
        async with self._db.connection() as conn:
            row = await conn.fetchrow(
                SQL.insert_artifact,
                session_id,
                kind,
                name,
                uri,
                content,
                seq_no,
                dict(metadata or {}),
            )
        assert row is not None
        return _artifact(row)

    async def close_session(self, session_id: int) -> bool:
        """Close an active session; False if it was already closed."""
        await self.get_session(session_id)
        return await self.store.sessions.close_session(session_id)

    # --- MCP additions --------------------------------------------------------

    async def create_session(
        self,
        key: SessionKey,
        *,
        participant: str,
        title: str | None = None,
        kind: str = "chat",
        metadata: Mapping[str, Any] | None = None,
        reply_target: ReplyTarget | None = None,
    ) -> tuple[SessionRecord, bool]:
        """The active session of ``key``, created if there is none (``True``); the creator
        becomes a participant (role agent). ``reply_target``: where a first post into the
        place goes while nobody wrote there (kept if the session has one already)."""
        target = None if reply_target is None else reply_target.to_json()
        async with self._db.transaction() as conn:
            args = (key.platform, key.scope, key.chat_id, key.thread_id)
            row = await conn.fetchrow(
                SQL.create_session, *args, title, kind, dict(metadata or {}), target
            )
            created = row is not None
            if row is None:
                row = await conn.fetchrow(SQL.active_session, *args)
            if row is None:  # created and closed in between: vanishingly rare, say so
                raise RequestError("the session was closed while being opened; try again")
            session = _session(row)
            if target is not None and not created:
                await conn.execute(SQL.set_place_target, session.id, target)
            await conn.execute(
                SQL.upsert_participant, session.id, participant, "agent", participant, 0
            )
        return session, created

    async def append_messages(
        self,
        session_id: int,
        *,
        participant: str,
        items: Sequence[tuple[str, Role, str | None]],
    ) -> list[MessageRecord]:
        """Append ``(content, role, model)`` items as ``participant`` in ONE transaction
        (all or nothing, consecutive seq numbers); stored only, never delivered."""
        if not items:
            return []
        async with self._db.transaction() as conn:
            last = await conn.fetchval(SQL.allocate_seqs, session_id, len(items))
            if last is None:
                await self._raise_not_active(conn, session_id)
            first = last - len(items) + 1
            out: list[MessageRecord] = []
            for seq, (content, role, model) in zip(range(first, last + 1), items, strict=True):
                row = await conn.fetchrow(
                    SQL.insert_participant_message,
                    session_id,
                    seq,
                    role,
                    participant,
                    content,
                    model,
                    None,
                    {"participant": participant, "batch": True},
                    "chat",
                    0,
                )
                assert row is not None
                out.append(_message(row))
            await conn.execute(
                SQL.upsert_participant, session_id, participant, "agent", participant, last
            )
        return out

    async def _raise_not_active(self, conn: asyncpg.Connection, session_id: int) -> NoReturn:
        status = await conn.fetchval(SQL.session_status, session_id)
        if status is None:
            raise SessionNotFound(f"no session {session_id}")
        raise RequestError(
            f"session {session_id} is {status}; messages can only be appended to an open "
            "(active or paused) session",
            status=409,
            title="Conflict",
        )


def _check_seq(seq_no: int | None, session: SessionRecord) -> None:
    if seq_no is not None and seq_no > session.last_seq_no:
        raise RequestError(
            f"seq_no {seq_no} is past the session's last message ({session.last_seq_no})"
        )
