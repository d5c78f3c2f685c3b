"""What the store takes and what it hands back: frozen values, each built from its row by its
fields (``session_store.rows.reader``; ``row_columns`` lists only the columns that need more
than a read). One record per concept (session, message, delivery, summary), whoever reads it:
the turn pipeline, the operator surface, the MCP tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, NamedTuple

from session_store.rows import SKIP, Column, or_empty, reader
from session_store.values import (
    DeliveryStatus,
    InboundStatus,
    IngestStatus,
    ReplyTarget,
    Role,
    SessionKey,
    SessionStatus,
    StoredKind,
    StoredPart,
    TurnRequest,
    key_from_row,
)

# --- what ingest takes -----------------------------------------------------------------


def _traceparent(row: Mapping[str, Any]) -> str | None:
    """The row's ``traceparent`` column (migration 0026), None where the read has none."""
    value = row.get("traceparent")
    return None if value is None else str(value)


def _column_or(name: str, default: Any, convert: Any = None) -> Column:
    """A column added by a later migration (0034): its default where the read has none."""

    def read(row: Mapping[str, Any]) -> Any:
        value = row.get(name)
        if value is None:
            return default
        return value if convert is None else convert(value)

    return Column(convert=read, whole_row=True)


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
    #: the W3C trace context of its ingest while tracing is on (migration 0026)
    traceparent: str | None = None
    #: a burst window (the place's ``burst_seconds``): the turn this message asks for starts
    #: once the thread was quiet this long (0: at once); written by the ingest itself
    burst_seconds: float = 0.0


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
    """An edit or deletion of a message already stored (found by its ``message_key``).

    ``follow_up``: what the place's conversation rules make of it once the message was
    answered (the door decides): ``update`` rewrites the answer to the thread's latest
    question, ``retract`` deletes the answer to a deleted message; ``None`` (``context``,
    ``keep``) only changes what later turns see."""

    platform: str
    kind: Literal["edit", "delete"]
    message_key: str
    content: str | None = None
    event_id: str | None = None
    follow_up: Literal["update", "retract"] | None = None


InboundItem = InboundMessage | InboundNote | InboundAnnotation


#: what a running turn is told through its session row: stop, or its question changed
TurnSignal = Literal["stop", "edit", "delete"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnWatch:
    """A running turn's look at its session row (``Turns.turn_watch``)."""

    requested_seq: int
    signal: TurnSignal | None = None
    signal_seq: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IngestResult:
    status: IngestStatus
    session_id: int | None = None
    message_id: int | None = None
    seq_no: int | None = None
    turn_requested: bool = False
    reason: str | None = None
    #: outbox rows this event wrote (an answer retracted): the delivery worker is woken
    deliveries_queued: int = 0
    #: an edit or a deletion: the seq of the message it concerns (a running turn is told)
    annotated_seq: int | None = None


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
    #: what the session is about, how much it matters, labels to find it by
    topic: str | None = None
    priority: int = 0
    tags: tuple[str, ...] = ()

    row_columns: ClassVar[Mapping[str, Column]] = {
        "key": Column(convert=key_from_row, whole_row=True),
        "topic": _column_or("topic", None),
        "priority": _column_or("priority", 0),
        "tags": _column_or("tags", (), tuple),
        "metadata": Column(convert=or_empty),
    }


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
    #: what the part is (migration 0016; ``gateway.core.parts.part_of`` types it): its
    #: kind, its typed fields (a versioned JSON document) and a file's bytes
    kind: str = "text"
    part: Mapping[str, Any] = field(default_factory=lambda: {"v": 1})
    data: bytes | None = None
    #: the trace context of the message it answers while tracing is on (migration 0026)
    traceparent: str | None = None

    row_columns: ClassVar[Mapping[str, Column]] = {
        "target": Column(convert=ReplyTarget.from_json),
        # a UUID column; the record carries its text
        "claim_token": Column(convert=str, if_null=None),
        "traceparent": Column(convert=_traceparent, whole_row=True),
    }


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
    #: the trace context of the message's ingest while tracing is on (migration 0026)
    traceparent: str | None = None
    #: what the message is (``chat``, ``answer``, ``decision``, ...) and its weight
    kind: StoredKind = "chat"
    importance: int = 0
    #: deleted on its platform (a turn's read of its pending messages says so; other reads
    #: leave it False)
    deleted: bool = False

    row_columns: ClassVar[Mapping[str, Column]] = {
        "reply_target": Column(convert=ReplyTarget.from_json, if_null=None),
        "metadata": Column(convert=or_empty),
        "deliveries": SKIP,
        # a row of a read that does not select it (an older column list) has none
        "traceparent": Column(convert=_traceparent, whole_row=True),
        "kind": _column_or("kind", "chat"),
        "importance": _column_or("importance", 0),
        "deleted": _column_or("deleted", False),
    }


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
    #: the unanswered messages read with the claim, in seq order (``Turns.claim_turn``);
    #: None when the claim was made without them or they must be read again
    pending: tuple[MessageRecord, ...] | None = None
    #: the turn's state and newest context page, read with the claim
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
    """What ``Outbox.finish_turn_outbox`` wrote: the replies' seq numbers, how many delivery
    rows, the first part already claimed for this process (``handed``: send it, then mark
    it), and whether messages that arrived during the run want another turn (``more``)."""

    seqs: list[int]
    deliveries: int
    handed: tuple[DeliveryRecord, ...]
    more: bool


class ContextRecord(NamedTuple):
    """One message as the agent's context reads it (``context_columns`` in
    ``repos/turns.sql``): a projection of a message row, edits applied, for the hot path.

    A named tuple rather than a frozen dataclass like the other records: a turn builds 50 of
    these per message, and a tuple is made in one step instead of nine frozen attribute
    writes (about a fifth of the client's time in the hot-path benchmark)."""

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


def _tool_calls(calls: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(calls, list):
        return ()
    return tuple(c for c in calls if isinstance(c, Mapping))


_CONTEXT_COLUMNS = {"tool_calls": Column(convert=_tool_calls, if_null=())}

#: a context row by column name (the claim's prefetched page is JSON objects)
context_from_row = reader(ContextRecord, columns=_CONTEXT_COLUMNS)
#: a context row whose columns are the fields in order (the context queries select them so)
context_from_values = reader(ContextRecord, columns=_CONTEXT_COLUMNS, by_position=True)


def _summary_or_none(row: Mapping[str, Any]) -> SummaryRecord | None:
    """The newest summary joined into a turn's state (``summary_`` columns), if any."""
    if row["summary_id"] is None:
        return None
    return _joined_summary(row)


_joined_summary = reader(SummaryRecord, prefix="summary_")


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnState:
    """What a turn needs besides the transcript (``turn_state`` in ``repos/turns.sql``)."""

    session_metadata: Mapping[str, Any]
    title: str | None
    selected_model: str | None
    user_model: str | None
    #: metadata of the message being answered (where it was asked, for the system prompt)
    place: Mapping[str, Any]
    summary: SummaryRecord | None

    row_columns: ClassVar[Mapping[str, Column]] = {
        "session_metadata": Column(name="metadata", convert=or_empty),
        "place": Column(convert=or_empty),
        "summary": Column(convert=_summary_or_none, whole_row=True),
    }


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

    row_columns: ClassVar[Mapping[str, Column]] = {"metadata": Column(convert=or_empty)}


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    id: int
    session_id: int
    linked_session_id: int | None
    relation: str
    url: str | None
    created_at: datetime
    link_type: str | None = None
    target_ref: str | None = None


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

    row_columns: ClassVar[Mapping[str, Column]] = {"metadata": Column(convert=or_empty)}


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

    row_columns: ClassVar[Mapping[str, Column]] = {
        "message_id": Column(name="id"),
        "session_key": Column(convert=key_from_row, whole_row=True),
        "session_title": Column(name="title"),
        "session_status": Column(name="status"),
        "rank": Column(convert=float),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Counts:
    sessions: Mapping[str, int]
    deliveries: Mapping[str, int]
    inbound: Mapping[str, int]
    oldest_pending_delivery_seconds: float | None
    #: the counts above that are the planner's estimates, not exact ("deliveries.sent",
    #: "sessions.active", "sessions.closed"): a set past ``estimates.EXACT_UP_TO`` rows
    approximate: tuple[str, ...] = ()
