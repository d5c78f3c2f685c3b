"""What the admin API and the MCP session tools share: keyset pagination cursors, finding a
session by id or key, and appending a participant's message through the normal outbox.

Both surfaces call this one layer, so a rule (a closed session takes no new messages, a
delivered message is split in the platform's own unit and carries the stored target) holds
the same way for an operator and for an agent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from gateway.core.domain import SessionKey
from gateway.core.errors import RequestError, SessionNotFound
from gateway.core.ports import Transport
from session_store.records import Checkpoint, MessageRecord, SearchHit, SessionRecord
from session_store.repos.operator import OperatorStore
from session_store.values import MessageKind, Role, SessionStatus

T = TypeVar("T")

MAX_PAGE = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class Page(Generic[T]):
    items: Sequence[T]
    next_cursor: str | None


#: every id and seq is below this (PostgreSQL bigint)
_MAX_ID = 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: the times a position can name (Python's datetime range)
_MIN_US = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_MAX_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)


def encode_cursor(kind: str, values: Sequence[Any]) -> str:
    """A keyset position written plainly: its values (ids, or microseconds since 1970 for a
    time; empty for none) joined by ``_`` (``kind`` names the listing, for the reader)."""
    return "_".join("" if v is None else str(int(v)) for v in values)


def decode_cursor(kind: str, text: str) -> list[Any]:
    """The values of a position (``encode_cursor``): integers, or None where a part is empty;
    400 for anything that is not digits joined by ``_`` (what the schema's patterns already
    refuse on the admin API; an MCP client may send anything)."""
    if not isinstance(text, str) or len(text) > 80:
        raise bad_cursor()
    values: list[Any] = []
    for part in text.split("_"):
        if part == "":
            values.append(None)
        elif part.lstrip("-").isascii() and part.lstrip("-").isdigit() and part.count("-") <= 1:
            values.append(int(part))
        else:
            raise bad_cursor()
    return values


def bad_cursor() -> RequestError:
    return RequestError(
        "the cursor is not one this listing returned; start again without a cursor",
        status=400,
        title="Invalid cursor",
    )


def _clamped_id(value: Any) -> int:
    """An id or seq as a position: any integer, kept within what a row can have (a position
    past every row is the start of the listing, one at 0 its end)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_cursor()
    return max(0, min(int(value), _MAX_ID))


def _one_id(values: list[Any]) -> int:
    """The position of a listing ordered by one id (or seq) descending."""
    if len(values) != 1:
        raise bad_cursor()
    return _clamped_id(values[0])


def time_of(micros: Any) -> datetime:
    """A position's time: microseconds since 1970 (UTC), kept within the datetime range."""
    if not isinstance(micros, int) or isinstance(micros, bool):
        raise bad_cursor()
    return _EPOCH + timedelta(microseconds=max(_MIN_US, min(micros, _MAX_US)))


def micros_of(when: datetime) -> int:
    """``when`` as microseconds since 1970 (a position's time)."""
    return (when - _EPOCH) // timedelta(microseconds=1)


def time_position(values: list[Any]) -> tuple[datetime, int]:
    """The position of a listing ordered by (time, id) descending, such as the audit log."""
    if len(values) != 2 or values[0] is None:
        raise bad_cursor()
    return time_of(values[0]), _clamped_id(values[1])


def _session_position(values: list[Any]) -> tuple[datetime | None, int]:
    """The position of the sessions listing: (last activity or None, id) of the last row."""
    if len(values) != 2:
        raise bad_cursor()
    return (None if values[0] is None else time_of(values[0])), _clamped_id(values[1])


async def paginate(
    kind: str,
    cursor: str | None,
    limit: int,
    fetch: Callable[[Any, int], Awaitable[Sequence[T]]],
    position: Callable[[T], list[Any]],
    *,
    parse: Callable[[list[Any]], Any] = _one_id,
) -> Page[T]:
    """One page of a keyset-paged listing, for the admin API and the MCP tools alike.

    ``fetch(after, n)`` reads up to ``n`` rows after the position ``after`` (``None`` for
    the first page; otherwise what ``parse`` made of the cursor's values). One row more than
    ``limit`` is read, so ``next_cursor`` (``position`` of the last row) is given only when
    there really is a next page."""
    after = None if cursor is None else parse(decode_cursor(kind, cursor))
    items = list(await fetch(after, limit + 1))
    next_cursor = None
    if len(items) > limit:
        items = items[:limit]
        next_cursor = encode_cursor(kind, position(items[-1]))
    return Page(items=items, next_cursor=next_cursor)


def session_position(session: SessionRecord) -> list[Any]:
    when = session.last_message_at
    return [None if when is None else micros_of(when), session.id]


class OperatorService:
    def __init__(
        self,
        ops: OperatorStore,
        *,
        transports: Mapping[str, Transport],
        outbox_written: Callable[[], None] = lambda: None,
    ) -> None:
        self.ops = ops
        self._transports = transports
        self._outbox_written = outbox_written

    async def resolve(self, ref: int | str) -> SessionRecord:
        """A session by id (``42`` or ``"42"``) or key (``platform:scope:chat:thread``, the
        active session for that place, else its newest closed one)."""
        if isinstance(ref, int) or (ref.strip().isascii() and ref.strip().isdigit()):
            session_id = int(ref)
            if not 0 < session_id < 2**63:
                raise SessionNotFound(f"no session {ref}")
            return await self.ops.store.sessions.get_session(session_id)
        try:
            key = SessionKey.parse(ref.strip())
        except ValueError as exc:
            raise RequestError(
                f"{ref!r} is neither a session id nor a key (platform:scope:chat:thread)",
                title="Invalid session reference",
            ) from exc
        found = await self.ops.store.sessions.find_session(key)
        if found is None:
            raise SessionNotFound(f"no session for key {key}")
        return found

    async def list_sessions(
        self,
        *,
        platform: str | None = None,
        chat_id: str | None = None,
        thread_id: str | None = None,
        status: SessionStatus | None = None,
        title_contains: str | None = None,
        topic_contains: str | None = None,
        min_priority: int | None = None,
        tags: Sequence[str] | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> Page[SessionRecord]:
        """Newest activity first; ``tags``: sessions carrying all of them."""

        async def fetch(after: Any, n: int) -> list[SessionRecord]:
            return await self.ops.store.sessions.list_sessions(
                platform=platform,
                chat_id=chat_id,
                thread_id=thread_id,
                status=status,
                title_contains=title_contains,
                topic_contains=topic_contains,
                min_priority=min_priority,
                tags=tags,
                after=after,
                limit=n,
            )

        return await paginate(
            "sessions", cursor, limit, fetch, session_position, parse=_session_position
        )

    async def search(
        self,
        query: str,
        *,
        session_id: int | None = None,
        platform: str | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> Page[SearchHit]:
        """Full-text search, newest first: inside one session (paged by seq), or across
        sessions (paged by message id)."""

        async def fetch(before: Any, n: int) -> list[SearchHit]:
            return await self.ops.search(
                query, session_id=session_id, platform=platform, before=before, limit=n
            )

        if session_id is not None:
            return await paginate("search-session", cursor, limit, fetch, lambda h: [h.seq_no])
        return await paginate("search", cursor, limit, fetch, lambda h: [h.message_id])

    async def append(
        self,
        ref: int | str,
        *,
        participant: str,
        content: str,
        deliver: bool = False,
        role: Role = "assistant",
        model: str | None = None,
        kind: MessageKind = "chat",
        importance: int = 0,
    ) -> MessageRecord:
        """Append ``content`` as ``participant``, of ``kind`` (a ``decision`` is read back by
        ``decisions``). With ``deliver`` it goes out through the
        outbox to the session's own thread, split and formatted by that platform's
        transport exactly as an agent's reply is."""
        session = await self.resolve(ref)
        parts: list[str] | None = None
        if deliver:
            if role != "assistant":
                raise RequestError("only assistant messages can be delivered to the thread")
            transport = self._transports.get(session.key.platform)
            if transport is None:
                raise RequestError(
                    f"platform {session.key.platform!r} is not configured in this process, so "
                    "its messages cannot be split for delivery; configure it (the same settings "
                    "as `gateway run`) or append without delivery",
                    status=409,
                    title="Conflict",
                )
            parts = transport.parts(content)
            if not parts:
                raise RequestError("content is empty after trimming; nothing to deliver")
        message = await self.ops.append_message(
            session.id,
            participant=participant,
            content=content,
            role=role,
            model=model,
            parts=parts,
            metadata={"via": "operator"},
            kind=kind,
            importance=importance,
        )
        if parts:
            self._outbox_written()
        return message

    # --- lifecycle ---------------------------------------------------------------------

    async def move(self, ref: int | str, step: str) -> SessionRecord:
        """``pause``, ``resume``, ``close`` or ``archive`` the session (a step its status does
        not allow is a 409). A resumed session's waiting turn is answered by the workers."""
        session = await self.resolve(ref)
        return await self.ops.store.sessions.transition(session.id, step)

    async def set_attributes(
        self,
        ref: int | str,
        *,
        topic: str | None = None,
        priority: int | None = None,
        tags: Sequence[str] | None = None,
    ) -> SessionRecord:
        session = await self.resolve(ref)
        return await self.ops.store.sessions.set_attributes(
            session.id, topic=topic, priority=priority, tags=tags
        )

    async def decisions(
        self, ref: int | str, *, limit: int = 200
    ) -> tuple[SessionRecord, list[MessageRecord], list[Checkpoint]]:
        """The session's decisions, oldest first, and its unresolved checkpoints."""
        session = await self.resolve(ref)
        decisions, checkpoints = await self.ops.store.sessions.decisions(session.id, limit=limit)
        return session, decisions, checkpoints
