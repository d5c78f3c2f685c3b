"""The core's side of an adapter's ``Intake``, one class per part: ``CoreIntake`` stores what
the door (``gateway.inbound.ingress.Door``) admitted, ``CoreCursors`` keeps adapters'
cursors, ``CoreInteractions`` takes feedback and approval clicks, ``IngressLifecycle`` runs
receive loops on the leader or supervised. The composition root hands each adapter these
behind its own door (``gateway.inbound.ingress.SurfaceIntake``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any, Literal, TypeGuard

import structlog

from gateway.core import tracing
from gateway.core.domain import (
    PLACE_KEY,
    Envelope,
    EventKind,
    Extracted,
    Ignored,
    Rejected,
    SessionKey,
    Trigger,
)
from gateway.core.errors import StoreError
from gateway.core.hub import Broadcast, Signal
from gateway.core.lifecycle.leadership import Body, LeaderElection
from gateway.core.lifecycle.supervisor import Beat, Supervisor
from gateway.core.metrics import Metrics
from gateway.core.ports import ApprovalClick, ApprovalDecider, ClickOutcome, IngestOutcome
from gateway.inbound.cleaning import clean_raw, clean_value
from session_store.records import (
    InboundAnnotation,
    InboundItem,
    InboundMessage,
    InboundNote,
    IngestResult,
)
from session_store.store import Store
from session_store.values import TurnRequest

log = structlog.get_logger(__name__)


def live_topic(key: SessionKey) -> str:
    """Broadcast topic of one conversation place (web chat live streams subscribe to it)."""
    return f"{key.platform}:{key.scope}:{key.chat_id}:{key.thread_id or ''}"


#: the core's answer policy, as the store applies it atomically with the session row
_TURN_REQUEST: dict[Trigger, TurnRequest] = {
    Trigger.ALWAYS: "always",
    Trigger.IF_FOLLOWING: "if_answered",
    Trigger.NEVER: "never",
}


def message_key(envelope: Envelope) -> str:
    """The message's identity in its chat: the inbox's second dedupe key."""
    return f"{envelope.key.scope}:{envelope.key.chat_id}:{envelope.message_id}"


#: the reasons the surfaces give for the bot's own posts, which Slack, Mattermost and
#: Telegram send back as events (one per reply): acknowledged and counted in
#: ``gateway_inbound_events_total``, not kept in the inbox
OWN_ECHOES = frozenset({"own message", "own post", "own message edited", "own message deleted"})
#: the platforms' notices about a conversation, no one's message: Telegram's service messages
#: (a forum topic created, one per new topic, renamed, closed) and Mattermost's system posts (a
#: user joined): counted and acknowledged like the echoes, not kept (a transaction each)
NOTICES = ("service message: ", "system post ")


def counted_only(extracted: Extracted) -> TypeGuard[Ignored]:
    """An event the inbox does not keep: acknowledged and counted only."""
    return isinstance(extracted, Ignored) and (
        extracted.reason in OWN_ECHOES or extracted.reason.startswith(NOTICES)
    )


#: the longest identifier (chat, thread, scope, message, sender, event id) kept, in UTF-8
#: bytes: real platform ids are far shorter, and a btree index row must stay under 2704 bytes
#: (a fuzzed 3 KB Slack user id was stored, then failed every turn of its session)
MAX_ID_BYTES = 200


def _too_long(value: str | None) -> bool:
    return value is not None and len(value.encode("utf-8")) > MAX_ID_BYTES


def _oversized_id(item: InboundItem) -> str | None:
    """The name of the first identifier of ``item`` longer than ``MAX_ID_BYTES``."""
    if isinstance(item, InboundMessage):
        ids = {
            "scope": item.key.scope,
            "chat id": item.key.chat_id,
            "thread id": item.key.thread_id,
            "message id": item.external_id,
            "message key": item.message_key,
            "sender id": item.sender_id,
            "event id": item.event_id,
            "reply-to id": item.reply_to_external_id,
        }
    elif isinstance(item, InboundAnnotation):
        ids = {"message key": item.message_key, "event id": item.event_id}
    else:
        ids = {"event id": item.event_id}
    return next((name for name, value in ids.items() if _too_long(value)), None)


def to_inbound(extracted: Extracted) -> InboundItem:
    """What the store keeps of one extracted event, cleaned of what PostgreSQL cannot
    store (see ``clean_value``; noted in a message's metadata as ``sanitized``). An event
    with an identifier no platform would send (longer than ``MAX_ID_BYTES``) is a rejected
    dead letter, its event id dropped when that is the long one."""
    notes: set[str] = set()
    item = clean_value(_to_inbound(extracted), notes)
    oversized = _oversized_id(item)
    if oversized is not None:
        platform = item.key.platform if isinstance(item, InboundMessage) else item.platform
        event_id = None if _too_long(item.event_id) else item.event_id
        return InboundNote(
            platform=platform,
            status="rejected",
            reason=f"{oversized} longer than {MAX_ID_BYTES} bytes",
            event_id=event_id,
        )
    if notes and isinstance(item, InboundMessage):
        item = replace(item, metadata={**item.metadata, "sanitized": sorted(notes)})
    return item


def _to_inbound(extracted: Extracted) -> InboundItem:
    if isinstance(extracted, Rejected):
        return InboundNote(
            platform=extracted.platform,
            status="rejected",
            reason=extracted.reason,
            event_id=extracted.event_id,
        )
    if not isinstance(extracted, Envelope):
        return InboundNote(
            platform=extracted.platform,
            status="ignored",
            reason=extracted.reason,
            event_id=extracted.event_id,
        )
    if extracted.kind is not EventKind.MESSAGE:
        return InboundAnnotation(
            platform=extracted.key.platform,
            kind="edit" if extracted.kind is EventKind.EDIT else "delete",
            message_key=message_key(extracted),
            content=extracted.text,
            event_id=extracted.event_id,
            follow_up=_follow_up(extracted),
        )
    return InboundMessage(
        key=extracted.key,
        target=extracted.target,
        external_id=extracted.message_id,
        message_key=message_key(extracted),
        content=extracted.text,
        sender_id=extracted.sender.id,
        sender_name=extracted.sender.name,
        event_id=extracted.event_id,
        turn_request=_TURN_REQUEST[extracted.trigger],
        command=extracted.command,
        reply_to_external_id=extracted.reply_to_id,
        backfill=extracted.backfill,
        sent_at=extracted.sent_at,
        metadata=_message_metadata(extracted),
        burst_seconds=extracted.burst_seconds,
    )


def _follow_up(env: Envelope) -> Literal["update", "retract"] | None:
    """What the door's conversation rules ask of an edit's or deletion's answer
    (``gateway.inbound.ingress.follow_up``)."""
    wanted = env.metadata.get("follow_up")
    if wanted == "update" and env.kind is EventKind.EDIT:
        return "update"
    if wanted == "retract" and env.kind is EventKind.DELETE:
        return "retract"
    return None


def _message_metadata(env: Envelope) -> dict[str, Any]:
    meta: dict[str, Any] = dict(env.metadata)
    meta[PLACE_KEY] = env.place.as_json()
    if env.attachments:
        meta["attachments"] = [
            {k: v for k, v in asdict(a).items() if v is not None} for a in env.attachments
        ]
    if env.sender.is_bot:
        meta["sender_is_bot"] = True
    return meta


def trace_ids(extracted: Extracted) -> dict[str, Any]:
    """The place's ids a message's spans carry (``gateway.core.tracing``)."""
    if not isinstance(extracted, Envelope):
        return {"gateway.platform": extracted.platform, "gateway.event_id": extracted.event_id}
    return tracing.place_ids(extracted.key, message_id=extracted.message_id)


async def tell_running_turn(store: Store, kind: str, result: IngestResult) -> None:
    """An edit or a deletion just recorded may concern the question of a turn running now
    (on any replica): its session row says so, and the running turn starts over on the new
    text, or stops and removes its preview (``gateway.turns.scheduler``). Best effort: the
    annotation is stored, and a turn not told answers what it read."""
    seq = result.annotated_seq
    if result.session_id is None or seq is None or kind not in ("edit", "delete"):
        return
    try:
        told = await store.turns.signal_turn(
            result.session_id, "edit" if kind == "edit" else "delete", seq
        )
    except StoreError as exc:
        log.warning("running_turn_not_told", change=kind, error=str(exc))
        return
    if told:
        log.info("running_turn_told", change=kind, session_id=result.session_id)


class CoreIntake:
    """The inbox step behind every door: stores one admitted event (inbox dedupe, session,
    message) and wakes its turn. It decides nothing; adapters never hold it, only their
    ``Door``."""

    def __init__(
        self,
        store: Store,
        *,
        metrics: Metrics,
        turn_wake: Signal,
        live: Broadcast,
        delivery_wake: Signal | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._turn_wake = turn_wake
        self._live = live
        #: woken for the outbox rows an event wrote (an answer retracted)
        self._delivery_wake = delivery_wake

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        if not tracing.enabled():
            return await self._submit(extracted, raw=raw)
        # the trace of this message starts here (its turn and deliveries continue it)
        with tracing.span("ingest", ids=trace_ids(extracted)):
            return await self._submit(extracted, raw=raw)

    async def _submit(
        self, extracted: Extracted, *, raw: Mapping[str, Any] | None
    ) -> IngestOutcome:
        if counted_only(extracted):
            # counted, never stored: a row per reply would be a transaction per message
            # for nothing (a redelivery is ignored again just the same)
            self._metrics.inbound.labels(extracted.platform, "ignored").inc()
            return IngestOutcome(status="ignored", reason=extracted.reason)
        platform = extracted.key.platform if isinstance(extracted, Envelope) else extracted.platform
        started = time.perf_counter()
        notes: set[str] = set()
        stored_raw = clean_raw(raw, notes)
        item = to_inbound(extracted)
        if notes and isinstance(item, InboundMessage):
            sanitized = sorted({*item.metadata.get("sanitized", ()), *notes})
            item = replace(item, metadata={**item.metadata, "sanitized": sanitized})
        traceparent = tracing.inject()
        if traceparent is not None and isinstance(item, InboundMessage):
            item = replace(item, traceparent=traceparent)
        try:
            result = await self._store.inbox.ingest(item, raw=stored_raw)
        except StoreError as exc:
            if exc.transient:
                raise  # the database is away: not stored, the surface retries later
            result = await self._dead_letter(platform, item.event_id, exc)
        if isinstance(item, InboundAnnotation) and result.status == "accepted":
            await tell_running_turn(self._store, item.kind, result)
        self._metrics.ingest_seconds.labels(platform).observe(
            time.perf_counter() - started, exemplar=tracing.exemplar()
        )
        self._metrics.inbound.labels(platform, result.status).inc()
        tracing.annotate(
            {"gateway.outcome": result.status, "gateway.session_id": result.session_id}
        )
        if isinstance(extracted, Envelope):
            structlog.contextvars.bind_contextvars(
                platform=platform,
                chat_id=extracted.key.chat_id,
                thread_id=extracted.key.thread_id,
                session_id=result.session_id,
                seq_no=result.seq_no,
            )
            try:
                log.info(
                    "inbound_stored",
                    outcome=result.status,
                    event_id=extracted.event_id,
                    message_id=extracted.message_id,
                    kind=extracted.kind.value,
                    turn_requested=result.turn_requested,
                )
            finally:
                structlog.contextvars.unbind_contextvars(
                    "platform", "chat_id", "thread_id", "session_id", "seq_no"
                )
            if result.status == "accepted":
                self._live.publish(
                    live_topic(extracted.key),
                    {"type": "message", "session_id": result.session_id, "seq_no": result.seq_no},
                )
        else:
            log.info(
                "inbound_not_stored_as_message",
                platform=platform,
                outcome=result.status,
                reason=extracted.reason,
                event_id=extracted.event_id,
            )
        if result.turn_requested:
            self._turn_wake.set(result.session_id)
        if result.deliveries_queued and self._delivery_wake is not None:
            for _ in range(result.deliveries_queued):
                self._delivery_wake.set()
        return IngestOutcome(
            status=result.status,
            session_id=result.session_id,
            seq_no=result.seq_no,
            reason=result.reason,
        )

    async def _dead_letter(
        self, platform: str, event_id: str | None, exc: StoreError
    ) -> IngestResult:
        """The database refuses an item for good: keep a dead letter with the reason, so that
        the surface moves past it (a poison item never blocks the ones behind)."""
        log.error(
            "inbound_unstorable",
            platform=platform,
            error=str(exc),
            sqlstate=exc.sqlstate,
            event_id=event_id,
        )
        reason = f"cannot be stored: {exc.sqlstate or type(exc).__name__}"
        return await self._store.inbox.ingest(
            InboundNote(platform=platform, status="rejected", reason=reason, event_id=event_id),
            raw={"unstorable": True, "sqlstate": exc.sqlstate},
        )

    async def knows(self, key: SessionKey) -> bool:
        return await self._store.sessions.has_active_session(key)


class CoreCursors:
    """Adapters' durable cursors, in the store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def load_cursor(self, name: str) -> str | None:
        return await self._store.inbox.load_cursor(name)

    async def save_cursor(self, name: str, value: str) -> None:
        await self._store.inbox.save_cursor(name, value)


#: a reaction on a card the core does not know yet is asked again after these pauses: the
#: reaction may come before the card's delivery has recorded its message id (0.75 s in all)
CARD_RECEIPT_WAITS = (0.05, 0.2, 0.5)


class CoreInteractions:
    """Feedback on the bot's messages and approval clicks, from every surface."""

    def __init__(self, store: Store) -> None:
        self._store = store
        #: approvals in the thread, set by the composition root
        self.approvals: ApprovalDecider | None = None

    async def approval_click(self, click: ApprovalClick) -> ClickOutcome:
        """A press of a card's button (its approval id), or a reaction on a card (no approval
        id: the card is found by its message id). A card shows on the platform before its
        delivery records that id, so a reaction answered "unknown" is asked again after
        :data:`CARD_RECEIPT_WAITS`."""
        if self.approvals is None:
            return ClickOutcome(outcome="unknown", message="Approvals are off here.")
        outcome = await self.approvals.click(click)
        if click.approval_id:
            return outcome
        for delay in CARD_RECEIPT_WAITS:
            if outcome.outcome != "unknown":
                break
            await asyncio.sleep(delay)
            outcome = await self.approvals.click(click)
        return outcome

    async def stop_answer(self, *, platform: str, chat_id: str, message_id: str) -> bool:
        """A stop reaction on the bot's answer (sent, or a preview while it streams): the
        turn running in its session is told to stop through the session row, on whichever
        replica it runs."""
        session = await self._store.turns.session_of_answer(platform, chat_id, message_id)
        if session is None:
            return False
        told = await self._store.turns.signal_turn(session, "stop")
        log.info("stop_reaction", platform=platform, session_id=session, running=told)
        return told

    async def record_feedback(
        self, *, platform: str, chat_id: str, message_id: str, user_id: str, value: int
    ) -> bool:
        found = await self._store.sessions.find_bot_message(
            platform, chat_id=chat_id, platform_message_id=message_id
        )
        if found is None:
            return False
        result = await self._store.sessions.set_feedback(found, user_id=user_id, value=value)
        log.info(
            "feedback_recorded", platform=platform, chat_id=chat_id, value=value, feedback=result
        )
        return True


class IngressLifecycle:
    """Receive loops on the leader (``lead``) or on every replica (``supervise``), under the
    core's supervisor: offered to adapters in their context and their ``Intake``."""

    def __init__(
        self, dsn: str, *, leader_interval: float = 5.0, supervisor: Supervisor | None = None
    ) -> None:
        #: leader election for single-connection ingress (see ``gateway.core.lifecycle.leadership``)
        self.election = LeaderElection(dsn, interval=leader_interval)
        self._supervisor = supervisor

    async def lead(self, name: str, body: Body, *, stopping: asyncio.Event | None = None) -> None:
        """Run an adapter's receive loop ``body`` on the leader, supervised: if it raises,
        it is logged, counted (``gateway_worker_restarts_total{worker="ingress:NAME"}``)
        and started again with backoff; it ends when it returns or ``stopping`` is set."""
        if self._supervisor is None:
            await self.election.run(name, body, stopping=stopping)
            return

        async def elected(beat: Beat) -> None:
            await self.election.run(name, body, stopping=stopping)

        await self._supervisor.supervise(
            f"ingress:{name}", elected, stopping=stopping, restart_on_return=False
        )

    async def supervise(
        self, name: str, body: Body, *, stopping: asyncio.Event | None = None
    ) -> None:
        """Run a receive loop ``body`` that every replica runs (Slack Socket Mode: Slack
        spreads an app's events over its connections), supervised like ``lead``'s:
        restarted with backoff, counted as ``ingress:NAME``, shown in ``/readyz``."""
        if self._supervisor is None:
            await body()
            return

        async def run(beat: Beat) -> None:
            await body()

        await self._supervisor.supervise(
            f"ingress:{name}", run, stopping=stopping, restart_on_return=False
        )
