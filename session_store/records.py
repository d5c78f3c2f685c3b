"""What the store takes and what it hands back: frozen values, each read from its row in one
``from_row``. One record per concept (session, message, delivery, summary), whoever reads it:
the turn pipeline, the operator surface, the MCP tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, NamedTuple

from session_store.values import (
    DeliveryStatus,
    InboundStatus,
    IngestStatus,
    ReplyTarget,
    Role,
    SessionKey,
    SessionStatus,
    StoredPart,
    TurnRequest,
)

# --- what ingest takes -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundMessage:
    """One inbound message to append to the active session of ``key``.

    The inbox dedupes on ``event_id`` (the platform's delivery id) and on ``message_key``
    (the message's identity in its chat, ``scope:chat:message id``)."""

    key: SessionKey
    target: ReplyTarget
    external_id: str
    message_key: str
    content: str
    sender_id: str
    sender_name: str | None = None
    event_id: str | None = None
    turn_request: TurnRequest = "always"
    command: str | None = None
    reply_to_external_id: str | None = None
    backfill: bool = False
    sent_at: datetime | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundNote:
    """An inbound event that does not become a message: kept in the inbox as ``ignored``
    (valid but not conversation) or ``rejected`` (a dead letter), with the reason."""

    platform: str
    status: Literal["ignored", "rejected"]
    reason: str
    event_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundAnnotation:
    """An edit or deletion of a message already stored (found by its ``message_key``)."""

    platform: str
    kind: Literal["edit", "delete"]
    message_key: str
    content: str | None = None
    event_id: str | None = None


InboundItem = InboundMessage | InboundNote | InboundAnnotation


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestResult:
    status: IngestStatus
    session_id: int | None = None
    message_id: int | None = None
    seq_no: int | None = None
    turn_requested: bool = False
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutgoingReply:
    """One assistant message and the parts it is delivered as (already split)."""

    content: str
    #: a string is a text part
    parts: Sequence[StoredPart | str]
    model: str | None = None
    tokens_used: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: ``tool`` for a tool result; an assistant message with tool calls (in ``metadata``)
    #: and a tool result have no ``parts``: stored in the transcript, never delivered
    role: Literal["assistant", "tool"] = "assistant"


# --- sessions, messages, deliveries ----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRecord:
    id: int
    key: SessionKey
    status: SessionStatus
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
    def from_row(cls, row: Mapping[str, Any]) -> SessionRecord:
        return cls(
            id=row["id"],
            key=SessionKey.from_row(row),
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
class DeliveryRecord:
    """One outbox row: where it goes (the stored target), how it went, and why it failed."""

    #: an API that serializes the record (the admin API, through pydantic, which reads this
    #: attribute) shows a file part's bytes as base64
    __pydantic_config__: ClassVar[dict[str, Any]] = {"ser_json_bytes": "base64"}

    id: int
    message_id: int
    session_id: int
    seq_no: int
    part_no: int
    platform: str
    target: ReplyTarget
    content: str
    status: DeliveryStatus
    attempts: int
    last_error: str | None
    platform_message_id: str | None
    next_attempt_at: datetime
    created_at: datetime
    sent_at: datetime | None
    #: the fencing token of the claim that is sending it (None when not claimed)
    claim_token: str | None = None
    #: failed because the send may or may not have reached the platform: retrying it may
    #: post it twice (look at the thread first)
    ambiguous: bool = False
    #: sending, but still waiting for its chat's pacer until then: nothing of it is on the
    #: wire yet (set only while such a wait lasts; migration 0014)
    pacing_until: datetime | None = None
    #: what the part is (migration 0016; ``gateway.outbox.parts.part_of`` types it): its
    #: kind, its typed fields (a versioned JSON document) and a file's bytes
    kind: str = "text"
    part: Mapping[str, Any] = field(default_factory=lambda: {"v": 1})
    data: bytes | None = None

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
            next_attempt_at=row["next_attempt_at"],
            created_at=row["created_at"],
            sent_at=row["sent_at"],
            claim_token=None if row["claim_token"] is None else str(row["claim_token"]),
            ambiguous=row["ambiguous"],
            pacing_until=row["pacing_until"],
            kind=row["kind"],
            part=row["part"],
            data=row["data"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageRecord:
    """A transcript row; ``deliveries`` holds the outbox rows of an assistant message when
    the read asked for them."""

    id: int
    session_id: int
    seq_no: int
    role: Role
    content: str
    sender_id: str | None
    sender_name: str | None
    external_id: str | None
    command: str | None
    trigger: str | None
    backfill: bool
    reply_target: ReplyTarget | None
    model: str | None
    tokens_used: int | None
    feedback: int | None
    edited_at: datetime | None
    created_at: datetime
    metadata: Mapping[str, Any]
    deliveries: tuple[DeliveryRecord, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MessageRecord:
        # every message query selects these columns (queries.MESSAGE_COLUMNS); indexing, not
        # .get, is measurably cheaper when a turn reads its pending messages
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
            feedback=row["feedback"],
            edited_at=row["edited_at"],
            created_at=row["created_at"],
            metadata=row["metadata"] or {},
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
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, prefix: str = "") -> SummaryRecord:
        """From a summary row, or from its columns inside a wider row (``prefix``)."""
        return cls(
            id=row[f"{prefix}id"],
            session_id=row[f"{prefix}session_id"],
            from_seq=row[f"{prefix}from_seq"],
            to_seq=row[f"{prefix}to_seq"],
            content=row[f"{prefix}content"],
            model=row[f"{prefix}model"],
            model_written=row[f"{prefix}model_written"],
            created_at=row[f"{prefix}created_at"],
        )


# --- the turn pipeline -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnClaim:
    """A session whose turn this worker now owns (``owner`` is the fencing token)."""

    session_id: int
    key: SessionKey
    owner: str
    done_seq: int
    requested_seq: int
    selected_model: str | None
    status: SessionStatus
    #: the unanswered messages read with the claim, in seq order (``Store.claim_turn``);
    #: None when the claim was made without them or they must be read again
    pending: tuple[MessageRecord, ...] | None = None
    #: the turn's state and newest context page, read with the claim (issue 17)
    context: PrefetchedContext | None = None
    #: the newest seq a run of this session handled before it parked on an approval
    #: (migration 0013); a resumed run handles up to there (stale once ``done_seq`` passed it)
    parked_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefetchedContext:
    """What ``ContextAssembler`` reads first, read in the claim's round trip: valid for the
    question ``question_seq`` answered up to ``upto_seq``; ``page`` is the newest ``limit``
    context rows after ``after_seq`` (the summary's end), newest first."""

    question_seq: int
    upto_seq: int
    state: TurnState
    after_seq: int
    limit: int
    page: tuple[ContextRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FinishedTurn:
    """What ``Store.finish_turn_outbox`` wrote: the replies' seq numbers, how many delivery
    rows, the first part already claimed for this process (``handed``: send it, then mark
    it), and whether messages that arrived during the run want another turn (``more``)."""

    seqs: list[int]
    deliveries: int
    handed: tuple[DeliveryRecord, ...]
    more: bool


class ContextRecord(NamedTuple):
    """One message as the agent's context reads it (see ``queries.CONTEXT_NEWEST_FIRST``):
    a projection of a message row, edits applied, for the hot path.

    A named tuple rather than a frozen dataclass like the other records: a turn builds 50 of
    these per message, and a tuple is made in one step instead of nine frozen attribute
    writes (issue 17: about a fifth of the client's time in the hot-path benchmark)."""

    id: int
    seq_no: int
    role: Role
    content: str
    sender_id: str | None = None
    sender_name: str | None = None
    #: for replies: the newest seq the turn that wrote it had handled
    answers_seq: int | None = None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tool_call_id: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ContextRecord:
        """From a row by column name (the claim's prefetched page is JSON objects)."""
        return cls(
            id=row["id"],
            seq_no=row["seq_no"],
            role=row["role"],
            content=row["content"],
            sender_id=row["sender_id"],
            sender_name=row["sender_name"],
            answers_seq=row["answers_seq"],
            tool_calls=_tool_calls(row["tool_calls"]),
            tool_call_id=row["tool_call_id"],
        )

    @classmethod
    def from_values(cls, row: Sequence[Any]) -> ContextRecord:
        """From a row whose columns are the fields in order (``queries._CONTEXT_COLUMNS``)."""
        i, seq_no, role, content, sender_id, sender_name, answers_seq, calls, call_id = row
        return _new_tuple(
            cls,
            (
                i,
                seq_no,
                role,
                content,
                sender_id,
                sender_name,
                answers_seq,
                () if calls is None else _tool_calls(calls),
                call_id,
            ),
        )


_new_tuple = tuple.__new__


def _tool_calls(calls: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(calls, list):
        return ()
    return tuple(c for c in calls if isinstance(c, Mapping))


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnState:
    """What a turn needs besides the transcript (see ``queries.TURN_STATE``)."""

    session_metadata: Mapping[str, Any]
    title: str | None
    selected_model: str | None
    user_model: str | None
    #: metadata of the message being answered (where it was asked, for the system prompt)
    place: Mapping[str, Any]
    summary: SummaryRecord | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TurnState:
        summary = None
        if row["summary_id"] is not None:
            summary = SummaryRecord.from_row(row, prefix="summary_")
        return cls(
            session_metadata=row["metadata"] or {},
            title=row["title"],
            selected_model=row["selected_model"],
            user_model=row["user_model"],
            place=row["place"] or {},
            summary=summary,
        )


# --- the operator surface --------------------------------------------------------------


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
    session: SessionRecord
    participants: tuple[Participant, ...]
    checkpoints: tuple[Checkpoint, ...]
    links: tuple[Link, ...]
    summaries: tuple[SummaryRecord, ...]
    artifacts: tuple[Artifact, ...]
    deliveries: Mapping[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundEvent:
    """An inbox row that did not become a message: the reason and the raw payload."""

    id: int
    platform: str
    event_id: str | None
    message_key: str | None
    status: InboundStatus
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
    session_status: SessionStatus
    seq_no: int
    role: Role
    sender_name: str | None
    snippet: str
    rank: float
    created_at: datetime

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SearchHit:
        return cls(
            message_id=row["id"],
            session_id=row["session_id"],
            session_key=SessionKey.from_row(row),
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
