"""The operator surface's reads and writes: sessions with everything attached to them, the
transcript with each reply's deliveries, full-text search, the outbox, dead letters, and the
super-session writes the MCP tools make (participant messages, checkpoints, summaries,
artifacts, read cursors).

It shares the ``Store``'s pool and its single driver-error translation (``Store._conn``), so
callers still never see SQL, records from the driver, or asyncpg errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NoReturn

from gateway.domain import ReplyTarget, SessionKey
from gateway.errors import RequestError, SessionNotFound
from session_store import operator_queries as q
from session_store import queries as core_q
from session_store.records import DeliveryRecord
from session_store.store import Store


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsSession:
    id: int
    key: SessionKey
    status: str
    title: str | None
    kind: str
    selected_model: str | None
    last_seq_no: int
    message_count: int
    created_at: datetime
    updated_at: datetime
    last_message_at: datetime | None
    closed_at: datetime | None
    metadata: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OpsSession:
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
            kind=row["kind"],
            selected_model=row["selected_model"],
            last_seq_no=row["last_seq_no"],
            message_count=row["message_count"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            last_message_at=row["last_message_at"],
            closed_at=row["closed_at"],
            metadata=row["metadata"] or {},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsDelivery(DeliveryRecord):
    """One outbox row: where it goes (the stored target), how it went, and why it failed;
    the hot path's ``DeliveryRecord`` plus the times an operator needs."""

    next_attempt_at: datetime
    created_at: datetime
    sent_at: datetime | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OpsDelivery:
        return cls(
            **DeliveryRecord.fields_of(row),
            next_attempt_at=row["next_attempt_at"],
            created_at=row["created_at"],
            sent_at=row["sent_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class OpsMessage:
    """A transcript row; ``deliveries`` holds the outbox rows of an assistant message."""

    id: int
    session_id: int
    seq_no: int
    role: str
    content: str
    sender_id: str | None
    sender_name: str | None
    external_id: str | None
    command: str | None
    trigger: str | None
    reply_target: ReplyTarget | None
    model: str | None
    tokens_used: int | None
    feedback: int | None
    edited_at: datetime | None
    created_at: datetime
    metadata: Mapping[str, Any]
    deliveries: tuple[OpsDelivery, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> OpsMessage:
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
            reply_target=None if target is None else ReplyTarget.from_json(target),
            model=row["model"],
            tokens_used=row["tokens_used"],
            feedback=row["feedback"],
            edited_at=row["edited_at"],
            created_at=row["created_at"],
            metadata=row["metadata"] or {},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Participant:
    session_id: int
    participant: str
    role: str
    display_name: str | None
    last_read_seq: int
    joined_at: datetime
    metadata: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Participant:
        return cls(
            session_id=row["session_id"],
            participant=row["participant"],
            role=row["role"],
            display_name=row["display_name"],
            last_read_seq=row["last_read_seq"],
            joined_at=row["joined_at"],
            metadata=row["metadata"] or {},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    id: int
    session_id: int
    name: str
    status: str
    seq_no: int | None
    detail: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Checkpoint:
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            name=row["name"],
            status=row["status"],
            seq_no=row["seq_no"],
            detail=row["detail"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    id: int
    session_id: int
    linked_session_id: int | None
    relation: str
    url: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Link:
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            linked_session_id=row["linked_session_id"],
            relation=row["relation"],
            url=row["url"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    id: int
    session_id: int
    from_seq: int
    to_seq: int
    content: str
    model: str | None
    model_written: bool
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Summary:
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
class Artifact:
    id: int
    session_id: int
    kind: str
    name: str
    uri: str | None
    content: str | None
    seq_no: int | None
    created_at: datetime
    metadata: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Artifact:
        return cls(
            id=row["id"],
            session_id=row["session_id"],
            kind=row["kind"],
            name=row["name"],
            uri=row["uri"],
            content=row["content"],
            seq_no=row["seq_no"],
            created_at=row["created_at"],
            metadata=row["metadata"] or {},
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionDetail:
    session: OpsSession
    participants: tuple[Participant, ...]
    checkpoints: tuple[Checkpoint, ...]
    links: tuple[Link, ...]
    summaries: tuple[Summary, ...]
    artifacts: tuple[Artifact, ...]
    deliveries: Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundEvent:
    """An inbox row that did not become a message: the reason and the raw payload."""

    id: int
    platform: str
    event_id: str | None
    message_key: str | None
    status: str
    reason: str | None
    payload: Any
    received_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> InboundEvent:
        return cls(
            id=row["id"],
            platform=row["platform"],
            event_id=row["event_id"],
            message_key=row["message_key"],
            status=row["status"],
            reason=row["reason"],
            payload=row["payload"],
            received_at=row["received_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchHit:
    """A message matching a full-text query, with the session it belongs to."""

    message_id: int
    session_id: int
    session_key: SessionKey
    session_title: str | None
    session_status: str
    seq_no: int
    role: str
    sender_name: str | None
    snippet: str
    rank: float
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SearchHit:
        return cls(
            message_id=row["id"],
            session_id=row["session_id"],
            session_key=SessionKey(
                platform=row["platform"],
                scope=row["scope"],
                chat_id=row["chat_id"],
                thread_id=row["thread_id"],
            ),
            session_title=row["title"],
            session_status=row["status"],
            seq_no=row["seq_no"],
            role=row["role"],
            sender_name=row["sender_name"],
            snippet=row["snippet"],
            rank=float(row["rank"]),
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts:
    sessions: Mapping[str, int]
    deliveries: Mapping[str, int]
    inbound: Mapping[str, int]
    oldest_pending_delivery_seconds: float | None


#: up to this many matching messages, a cross-session search sorts them all (see
#: operator_queries.SEARCH_ALL_COUNT)
FEW_MATCHES = 5000


class OperatorStore:
    def __init__(self, store: Store) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        return self._store

    # --- sessions ------------------------------------------------------------------------

    async def list_sessions(
        self,
        *,
        platform: str | None = None,
        chat_id: str | None = None,
        thread_id: str | None = None,
        status: str | None = None,
        title_contains: str | None = None,
        after: tuple[datetime | None, int] | None = None,
        limit: int = 50,
    ) -> list[OpsSession]:
        """Newest activity first; ``after`` is the (last_message_at, id) of the last row of
        the previous page."""
        pattern = None if not title_contains else _like_escape(title_contains)
        async with self._store._conn() as conn:
            rows = await conn.fetch(
                q.LIST_SESSIONS,
                platform,
                chat_id,
                status,
                pattern,
                thread_id,
                after is not None,
                after[0] if after else None,
                after[1] if after else None,
                limit,
            )
        return [OpsSession.from_row(r) for r in rows]

    async def get_session(self, session_id: int) -> OpsSession:
        async with self._store._conn() as conn:
            row = await conn.fetchrow(q.GET_SESSION, session_id)
        if row is None:
            raise SessionNotFound(f"no session {session_id}")
        return OpsSession.from_row(row)

    async def find_session(self, key: SessionKey) -> OpsSession | None:
        """The active session for ``key``, else its newest closed one."""
        async with self._store._conn() as conn:
            row = await conn.fetchrow(
                q.FIND_SESSION_BY_KEY, key.platform, key.scope, key.chat_id, key.thread_id
            )
        return None if row is None else OpsSession.from_row(row)

    async def session_detail(self, session_id: int) -> SessionDetail:
        async with self._store._conn() as conn:
            row = await conn.fetchrow(q.GET_SESSION, session_id)
            if row is None:
                raise SessionNotFound(f"no session {session_id}")
            participants = await conn.fetch(q.PARTICIPANTS, session_id)
            checkpoints = await conn.fetch(q.CHECKPOINTS, session_id)
            links = await conn.fetch(q.LINKS, session_id)
            summaries = await conn.fetch(q.SUMMARIES, session_id)
            artifacts = await conn.fetch(q.ARTIFACTS, session_id)
            deliveries = await conn.fetch(q.SESSION_DELIVERY_COUNTS, session_id)
        return SessionDetail(
            session=OpsSession.from_row(row),
            participants=tuple(Participant.from_row(r) for r in participants),
            checkpoints=tuple(Checkpoint.from_row(r) for r in checkpoints),
            links=tuple(Link.from_row(r) for r in links),
            summaries=tuple(Summary.from_row(r) for r in summaries),
            artifacts=tuple(Artifact.from_row(r) for r in artifacts),
            deliveries={r["status"]: r["n"] for r in deliveries},
        )

    async def active_session_count(self) -> int:
        async with self._store._conn() as conn:
            return int(await conn.fetchval(q.ACTIVE_SESSION_COUNT))

    async def counts(self) -> Counts:
        async with self._store._conn() as conn:
            sessions = await conn.fetchrow(q.SESSION_COUNTS)
            deliveries = await conn.fetch(core_q.DELIVERY_COUNTS)
            inbound = await conn.fetch(q.INBOUND_COUNTS)
            oldest = await conn.fetchval(core_q.OLDEST_PENDING_AGE)
        assert sessions is not None
        return Counts(
            sessions={"active": sessions["active"], "closed": sessions["closed"]},
            deliveries={status: 0 for status in ("pending", "sending", "sent", "failed")}
            | {r["status"]: r["n"] for r in deliveries},
            inbound={"rejected": 0, "ignored": 0} | {r["status"]: r["n"] for r in inbound},
            oldest_pending_delivery_seconds=None if oldest is None else float(oldest),
        )

    # --- transcript ----------------------------------------------------------------------

    async def messages(
        self,
        session_id: int,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        limit: int = 100,
        with_deliveries: bool = True,
    ) -> list[OpsMessage]:
        """Messages in seq order: the first ``limit`` after ``after_seq``, or, with
        ``before_seq``, the last ``limit`` before it. Assistant messages carry their
        delivery rows."""
        async with self._store._conn() as conn:
            if before_seq is not None:
                rows = list(
                    reversed(await conn.fetch(q.MESSAGES_BEFORE, session_id, before_seq, limit))
                )
            else:
                rows = await conn.fetch(q.MESSAGES_AFTER, session_id, after_seq or 0, limit)
            messages = [OpsMessage.from_row(r) for r in rows]
            ids = [m.id for m in messages if m.role != "user"]
            if not with_deliveries or not ids:
                return messages
            drows = await conn.fetch(q.DELIVERIES_OF_MESSAGES, ids)
        by_message: dict[int, list[OpsDelivery]] = {}
        for d in (OpsDelivery.from_row(r) for r in drows):
            by_message.setdefault(d.message_id, []).append(d)
        return [
            replace(m, deliveries=tuple(by_message[m.id])) if m.id in by_message else m
            for m in messages
        ]

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
        async with self._store._conn() as conn:
            if session_id is not None:
                rows = await conn.fetch(q.SEARCH_SESSION, session_id, query, before, limit)
            else:
                matches = await conn.fetchval(q.SEARCH_ALL_COUNT, query, before, FEW_MATCHES + 1)
                sql = q.SEARCH_ALL_FEW if matches <= FEW_MATCHES else q.SEARCH_ALL_MANY
                rows = await conn.fetch(sql, query, platform, before, limit)
        return [SearchHit.from_row(r) for r in rows]

    # --- outbox and inbox ----------------------------------------------------------------

    async def list_deliveries(
        self,
        *,
        status: str | None = None,
        platform: str | None = None,
        session_id: int | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[OpsDelivery]:
        async with self._store._conn() as conn:
            rows = await conn.fetch(
                q.LIST_DELIVERIES, status, platform, session_id, before_id, limit
            )
        return [OpsDelivery.from_row(r) for r in rows]

    async def get_delivery(self, delivery_id: int) -> OpsDelivery:
        async with self._store._conn() as conn:
            row = await conn.fetchrow(q.GET_DELIVERY, delivery_id)
        if row is None:
            raise RequestError(f"no delivery {delivery_id}", status=404, title="Not found")
        return OpsDelivery.from_row(row)

    async def retry_delivery(self, delivery_id: int) -> OpsDelivery:
        """Put a failed delivery back in the outbox (same row, same stored target)."""
        current = await self.get_delivery(delivery_id)
        if not await self._store.retry_failed_delivery(delivery_id):
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
        status: str = "rejected",
        platform: str | None = None,
        before_id: int | None = None,
        limit: int = 50,
    ) -> list[InboundEvent]:
        async with self._store._conn() as conn:
            rows = await conn.fetch(q.LIST_INBOUND_EVENTS, status, platform, before_id, limit)
        return [InboundEvent.from_row(r) for r in rows]

    # --- super-session writes ------------------------------------------------------------

    async def append_message(
        self,
        session_id: int,
        *,
        participant: str,
        content: str,
        role: str = "assistant",
        model: str | None = None,
        tokens_used: int | None = None,
        parts: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> OpsMessage:
        """Append a participant's message to an active session in one transaction. With
        ``parts`` it is also put in the outbox, one delivery row per part, carrying the target
        stored on the session's newest user message, so the delivery worker sends it to that
        exact thread. The author's read cursor moves past its own message."""
        async with self._store._conn() as conn, conn.transaction():
            target_json = None
            if parts is not None:
                target_json = await conn.fetchval(q.LATEST_USER_TARGET, session_id)
            seq = await conn.fetchval(q.ALLOCATE_SEQ, session_id)
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
                q.INSERT_PARTICIPANT_MESSAGE,
                session_id,
                seq,
                role,
                participant,
                content,
                model,
                tokens_used,
                {**(metadata or {}), "participant": participant},
            )
            assert row is not None
            message = OpsMessage.from_row(row)
            if parts and target_json is not None:
                target = ReplyTarget.from_json(target_json)
                await conn.execute(
                    core_q.INSERT_DELIVERIES,
                    session_id,
                    target.platform,
                    target.to_json(),
                    [message.id] * len(parts),
                    [seq] * len(parts),
                    list(range(1, len(parts) + 1)),
                    list(parts),
                )
            await conn.execute(
                q.UPSERT_PARTICIPANT, session_id, participant, "agent", participant, seq
            )
            if not parts:
                return message
            drows = await conn.fetch(q.DELIVERIES_OF_MESSAGES, [message.id])
        return replace(message, deliveries=tuple(OpsDelivery.from_row(r) for r in drows))

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
        async with self._store._conn() as conn:
            row = await conn.fetchrow(
                q.UPSERT_PARTICIPANT, session_id, participant, "agent", participant, seq
            )
        assert row is not None
        return Participant.from_row(row)

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
        async with self._store._conn() as conn:
            row = await conn.fetchrow(q.UPSERT_CHECKPOINT, session_id, name, status, seq_no, detail)
        assert row is not None
        return Checkpoint.from_row(row)

    async def create_summary(
        self,
        session_id: int,
        *,
        from_seq: int,
        to_seq: int,
        content: str,
        model: str | None = None,
        model_written: bool = True,
    ) -> Summary:
        session = await self.get_session(session_id)
        if from_seq > to_seq:
            raise RequestError(f"from_seq ({from_seq}) is after to_seq ({to_seq})")
        _check_seq(to_seq, session)
        async with self._store._conn() as conn:
            row = await conn.fetchrow(
                q.INSERT_SUMMARY, session_id, from_seq, to_seq, content, model, model_written
            )
        assert row is not None
        return Summary.from_row(row)

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
        async with self._store._conn() as conn:
            row = await conn.fetchrow(
                q.INSERT_ARTIFACT,
                session_id,
                kind,
                name,
                uri,
                content,
                seq_no,
                dict(metadata or {}),
            )
        assert row is not None
        return Artifact.from_row(row)

    async def close_session(self, session_id: int) -> bool:
        """Close an active session; False if it was already closed."""
        await self.get_session(session_id)
        return await self._store.close_session(session_id)

    async def _raise_not_active(self, conn: Any, session_id: int) -> NoReturn:
        status = await conn.fetchval(q.SESSION_STATUS, session_id)
        if status is None:
            raise SessionNotFound(f"no session {session_id}")
        raise RequestError(
            f"session {session_id} is {status}; messages can only be appended to an active session",
            status=409,
            title="Conflict",
        )


def _check_seq(seq_no: int | None, session: OpsSession) -> None:
    if seq_no is not None and seq_no > session.last_seq_no:
        raise RequestError(
            f"seq_no {seq_no} is past the session's last message ({session.last_seq_no})"
        )


def _like_escape(text: str) -> str:
    """``text`` as a literal inside ILIKE (``%`` and ``_`` are not wildcards here)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
