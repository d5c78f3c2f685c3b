"""The core's ``Intake``: what every adapter calls with an extracted event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import structlog

from gateway.domain import Envelope, EventKind, Extracted, Rejected, SessionKey, Trigger
from gateway.hub import Broadcast, Signal
from gateway.leadership import Body, LeaderElection
from gateway.metrics import Metrics
from gateway.ports import IngestOutcome
from gateway.supervisor import Beat, Supervisor
from session_store.records import InboundAnnotation, InboundItem, InboundMessage, InboundNote
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


def to_inbound(extracted: Extracted) -> InboundItem:
    """What the store keeps of one extracted event."""
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
    )


def _message_metadata(env: Envelope) -> dict[str, Any]:
    meta: dict[str, Any] = dict(env.metadata)
    if env.attachments:
        meta["attachments"] = [
            {k: v for k, v in asdict(a).items() if v is not None} for a in env.attachments
        ]
    if env.sender.is_bot:
        meta["sender_is_bot"] = True
    return meta


class CoreIntake:
    def __init__(
        self,
        store: Store,
        *,
        metrics: Metrics,
        turn_wake: Signal,
        live: Broadcast,
        leader_interval: float = 5.0,
        supervisor: Supervisor | None = None,
    ) -> None:
        #: leader election for single-connection ingress (see ``gateway.leadership``)
        self.election = LeaderElection(store.dsn, interval=leader_interval)
        self._store = store
        self._metrics = metrics
        self._turn_wake = turn_wake
        self._live = live
        self._supervisor = supervisor

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        platform = extracted.key.platform if isinstance(extracted, Envelope) else extracted.platform
        started = time.perf_counter()
        result = await self._store.ingest(to_inbound(extracted), raw=raw)
        self._metrics.ingest_seconds.labels(platform).observe(time.perf_counter() - started)
        self._metrics.inbound.labels(platform, result.status).inc()
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
            self._turn_wake.set()
        return IngestOutcome(
            status=result.status,
            session_id=result.session_id,
            seq_no=result.seq_no,
            reason=result.reason,
        )

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

    async def knows(self, key: SessionKey) -> bool:
        return await self._store.has_active_session(key)

    async def load_cursor(self, name: str) -> str | None:
        return await self._store.load_cursor(name)

    async def save_cursor(self, name: str, value: str) -> None:
        await self._store.save_cursor(name, value)

    async def record_feedback(
        self, *, platform: str, chat_id: str, message_id: str, user_id: str, value: int
    ) -> bool:
        found = await self._store.find_bot_message(
            platform, chat_id=chat_id, platform_message_id=message_id
        )
        if found is None:
            return False
        result = await self._store.set_feedback(found, user_id=user_id, value=value)
        log.info(
            "feedback_recorded", platform=platform, chat_id=chat_id, value=value, feedback=result
        )
        return True
