"""Approvals in the thread (invariant 9): a tool whose policy says ``confirm``
runs only after the asker (or a configured approver) approves, in the same thread.

The request is durable workflow state in PostgreSQL (``tool_approvals``: id, version for
optimistic locking, owner, idempotency key, ``expires_at``), so it survives restarts and
replicas. A turn whose request is still pending does not wait for it: ``decide`` raises
``ApprovalPending`` and the turn parks its session (the lease is handed back, the asking
message stays unanswered, no worker is held; migration 0013). A click on any replica
decides the request once (compare-and-set on the version) and, in the same transaction,
unparks the session; the expiry (by the sweeper, or a late click) does the same. The turn
loop is woken here and polled elsewhere; the re-run asks for the same call under the same
idempotency key and finds the decided request instead of opening a second one. After a
restart a parked turn is just an unanswered message and a request row. The card goes out
through the outbox, into the request's stored thread; on any outcome it is retired (buttons
removed, decision shown), by the turn, the click, or the sweeper (which also expires
overdue requests and catches up after restarts).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from gateway import audit
from gateway.agents.base import ToolCall
from gateway.core import tracing
from gateway.core.errors import StoreError
from gateway.core.hub import Signal
from gateway.core.metrics import Metrics
from gateway.core.ports import (
    ApprovalCards,
    ApprovalClick,
    ClickOutcome,
    Transport,
)
from gateway.tools.catalog import ToolCaller, ToolPolicy
from gateway.tools.runner import ApprovalPending, Decision
from session_store.repos.tools import ApprovalRecord, ToolStore
from session_store.store import Store
from session_store.values import ApprovalStatus

log = structlog.get_logger(__name__)

#: a card that was never sent (its delivery failed) is given up on after this long
GIVE_UP_RETIRE_SECONDS = 300.0


def idempotency_key(caller: ToolCaller, tool: str, arguments: Mapping[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:24]
    return f"{caller.session_id}:{caller.turn_seq}:{tool}:{digest}"


def _short(value: Any, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def card_text(record: ApprovalRecord, policy: ToolPolicy, minutes: int) -> str:
    return (
        f"Approval needed: the assistant wants to run {record.tool_name} "
        f"({policy.operation}, risk {policy.risk}) with {_short(record.arguments)}.\n"
        f"Only the person who asked{' (or an approver)' if record.approvers else ''} can "
        f"decide. Expires in {minutes} min if nobody does."
    )


def decided_text(record: ApprovalRecord) -> str:
    if record.status == "approved":
        return f"✅ Approved by {record.decided_by}: {record.tool_name} ran."
    if record.status == "denied":
        return f"❌ Denied by {record.decided_by}: {record.tool_name} did not run."
    return f"⌛ Expired: nobody decided, {record.tool_name} did not run."


class ApprovalService:
    def __init__(
        self,
        store: Store,
        *,
        metrics: Metrics,
        seconds: float,
        delivery_wake: Signal,
        turn_wake: Signal | None = None,
    ) -> None:
        self._store = ToolStore(store)
        #: decisions (and refused clicks) go to the audit log
        self._audit = store
        self._metrics = metrics
        self.seconds = seconds
        self._delivery_wake = delivery_wake
        self._turn_wake = turn_wake
        #: set by the composition root once the adapters exist
        self.transports: Mapping[str, Transport] = {}

    # --- the waiting turn (the toolbox's Approvals port) -------------------------------------

    async def decide(
        self,
        call: ToolCall,
        arguments: Mapping[str, Any],
        policy: ToolPolicy,
        caller: ToolCaller,
        *,
        approvers: tuple[str, ...] = (),
    ) -> Decision:
        if caller.target is None or caller.user_id is None:
            return "denied"  # nowhere to ask, or nobody to ask: fail closed
        record, new = await self._store.open_approval(
            approval_id=secrets.token_urlsafe(12),
            session_id=caller.session_id,
            idempotency_key=idempotency_key(caller, policy.name, arguments),
            tool_name=policy.name,
            arguments=arguments,
            owner=f"{caller.platform}:{caller.user_id}",
            approvers=approvers or policy.approvers,
            target=caller.target,
            expires_in=self.seconds,
        )
        log.info(
            "approval_requested" if new else "approval_resumed",
            approval_id=record.id,
            tool=record.tool_name,
            owner=record.owner,
            status=record.status,
            version=record.version,
        )
        if new:
            self._metrics.approvals.labels("requested").inc()
        if record.card_message_id is None and record.status == "pending":
            # an approval card part: the request's id is a field of the part
            seq = await self._store.queue_card(
                record.id,
                session_id=record.session_id,
                text=card_text(record, policy, max(1, round(self.seconds / 60))),
                target=record.target,
                metadata={"approval": {"id": record.id, "tool": record.tool_name}},
                # the card's send is a step of the asking message's trace
                traceparent=tracing.inject(),
            )
            if seq is not None:
                self._delivery_wake.set()
        if record.status == "pending":
            if not (
                record.overdue
                and await self._store.expire_approval(record.id, version=record.version)
            ):
                # not decided yet: the turn parks instead of holding a worker (the decision
                # or the expiry makes the session due again and wakes the turn loop)
                raise ApprovalPending(record.id)
            self._metrics.approvals.labels("expired").inc()
            log.info("approval_expired", approval_id=record.id)
            found = await self._store.get_approval(record.id)
            assert found is not None
            record = found
        if not new:
            # the wait, from the request to its decision (the turn was parked meanwhile, and
            # may have been resumed by another process): recorded once it is over
            with tracing.span(
                "approval.wait",
                {
                    "gen_ai.tool.name": record.tool_name,
                    "gateway.approval_id": record.id,
                    "gateway.outcome": record.status,
                },
                start=record.created_at,
            ):
                pass
        await self._retire(record)
        return (
            "approved"
            if record.status == "approved"
            else ("denied" if record.status == "denied" else "expired")
        )

    def _woke(self, session_id: int | None = None) -> None:
        """A request was decided or expired: a turn parked on it is due again (this
        process's turn workers at once, claiming ``session_id`` first; other replicas on
        their poll)."""
        if self._turn_wake is not None:
            self._turn_wake.set(session_id)

    # --- clicks from the adapters (the ApprovalDecider port) ---------------------------------

    async def click(self, click: ApprovalClick) -> ClickOutcome:
        if click.approval_id:
            record = await self._store.get_approval(click.approval_id)
        elif click.message_id is not None:
            # a reaction (Mattermost) names the card post, not the request
            record = await self._store.approval_by_card(click.platform, click.message_id)
        else:
            record = None
        if record is None or not _same_place(record, click):
            log.warning("approval_click_unknown", approval_id=click.approval_id)
            return ClickOutcome(outcome="unknown", message="This request is not known here.")
        who = f"{click.platform}:{click.user_id}"
        if who != record.owner and not any(fnmatch.fnmatchcase(who, p) for p in record.approvers):
            self._metrics.approvals.labels("refused_click").inc()
            log.info("approval_click_refused", approval_id=record.id, user=who)
            await self._record(record, click, "denied", "neither the asker nor an approver")
            return ClickOutcome(
                outcome="not_allowed",
                message="Sorry, only the person who asked (or an approver) can decide this one.",
            )
        if record.status == "pending" and record.overdue:
            if await self._store.expire_approval(record.id, version=record.version):
                self._metrics.approvals.labels("expired").inc()
            self._woke(record.session_id)
            return ClickOutcome(outcome="expired", message="This request has expired.")
        if record.status != "pending":
            return ClickOutcome(
                outcome="already_decided", message=f"Already decided: {record.status}."
            )
        status: ApprovalStatus = "approved" if click.approve else "denied"
        if not await self._store.decide_approval(
            record.id, version=record.version, status=status, decided_by=who
        ):
            # a concurrent click (or the expiry) won the compare-and-set: decided once
            found = await self._store.get_approval(record.id)
            now = found.status if found is not None else "unknown"
            return ClickOutcome(outcome="already_decided", message=f"Already decided: {now}.")
        self._metrics.approvals.labels(status).inc()
        log.info("approval_decided", approval_id=record.id, status=status, decided_by=who)
        await self._record(record, click, "ok", None)
        self._woke(record.session_id)
        found = await self._store.get_approval(record.id)
        if found is not None:
            await self._retire(found)
        return ClickOutcome(
            outcome=status,
            message="Approved. Running it now." if click.approve else "Denied. It will not run.",
        )

    async def _record(
        self,
        record: ApprovalRecord,
        click: ApprovalClick,
        outcome: audit.Outcome,
        reason: str | None,
    ) -> None:
        await audit.record(
            self._audit,
            "tool.approval.approve" if click.approve else "tool.approval.deny",
            ("tool.approval", record.id),
            outcome=outcome,
            reason=reason,
            actor=f"{click.platform}:{click.user_id}",
            surface=click.platform,
            details={"tool": record.tool_name, "session_id": record.session_id},
        )

    # --- cards -------------------------------------------------------------------------------

    async def _retire(self, record: ApprovalRecord) -> None:
        if record.card_retired or record.status == "pending":
            return
        if record.card_platform_message_id is None:
            return  # not sent yet: the sweeper retires it once it is
        if not await self._store.mark_card_retired(record.id):
            return  # the click, the turn or the sweeper got there first
        transport = self.transports.get(record.target.platform)
        if isinstance(transport, ApprovalCards):
            try:
                await transport.retire_card(
                    record.target, record.card_platform_message_id, decided_text(record)
                )
            except Exception as exc:  # noqa: BLE001 - a platform error: the sweeper retries
                log.warning("approval_card_retire_failed", approval_id=record.id, error=str(exc))
                await self._store.unmark_card_retired(record.id)
                return
        log.info("approval_card_retired", approval_id=record.id, status=record.status)

    async def sweep(self) -> None:
        """Expire overdue requests; retire the cards of decided ones (after a restart too)."""
        for approval_id, version in await self._store.overdue_approvals():
            if await self._store.expire_approval(approval_id, version=version):
                self._metrics.approvals.labels("expired").inc()
                log.info("approval_expired", approval_id=approval_id)
                self._woke()
        if await self._store.unpark_strays():
            self._woke()
        for record in await self._store.unretired_approvals():
            if record.card_platform_message_id is None:
                # never sent (yet): nothing to retire when there is no card, or when its
                # delivery has not gone out for a long time (failed)
                since = datetime.now(UTC) - (record.decided_at or record.created_at)
                if record.card_message_id is None or since.total_seconds() > GIVE_UP_RETIRE_SECONDS:
                    await self._store.mark_card_retired(record.id)
                continue
            await self._retire(record)

    async def run(self, stopping: asyncio.Event, interval: float = 1.0) -> None:
        while not stopping.is_set():
            try:
                await self.sweep()
            except StoreError as exc:
                log.warning("approval_sweep_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)


def _same_place(record: ApprovalRecord, click: ApprovalClick) -> bool:
    """A button carries only the opaque id; it counts only in the request's own chat, thread
    and card message."""
    target = record.target
    if click.platform != target.platform or click.chat_id != target.chat_id:
        return False
    if click.thread_id is not None and click.thread_id != target.thread_id:
        return False
    return not (
        click.message_id is not None
        and record.card_platform_message_id is not None
        and click.message_id != record.card_platform_message_id
    )
