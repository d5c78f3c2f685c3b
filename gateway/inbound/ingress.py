"""The core's ingress: the one door every adapter's inbound events pass through, and the
steps every surface shares, written once; each adapter keeps only its own transport (where
events come from, how the platform is told "received" or "try again").

The door (``Door``, the ``Ingest`` an adapter gets at start) applies the answer policy
(``gateway.inbound.policy``) to every event before it is stored: the envelope reports facts,
the rules are the ones the surface's plugin declares (``SurfacePlugin.answer_settings``) with
the place's profile, and ``admit`` turns them into the stored trigger, or an ``Ignored`` with
the reason. What the adapter set as trigger does not count, so a surface cannot forget the
policy nor get around it; one that reports no facts is kept as context.

One inbound event: extract safely (a bug in extraction becomes a ``Rejected`` dead letter
with the reason, never a stuck queue: architecture invariant 7), record the reaction it
carries as feedback, then submit. ``ingest`` returns only after the submit committed; when
it raises, nothing was stored and the adapter answers with the platform's retry (HTTP 500,
no Socket Mode ack, the offset not moved, the post held for a resync).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

import structlog
from starlette.responses import JSONResponse, Response

from gateway.core.domain import (
    Envelope,
    EventKind,
    Extracted,
    Facts,
    Ignored,
    Reaction,
    Rejected,
    ReplyTarget,
    Sender,
    SessionKey,
    Trigger,
)
from gateway.core.ports import (
    ApprovalClick,
    ClickOutcome,
    Cursors,
    Ingest,
    IngestOutcome,
    Interactions,
    Lifecycle,
    Places,
)
from gateway.core.profile import ConversationRules, Profile
from gateway.inbound.policy import Action, AnswerRules, Decision, decide

log = structlog.get_logger(__name__)

#: how much of an unreadable request body the dead letter keeps (characters)
BODY_KEPT = 65536


# --- the door -----------------------------------------------------------------------------

#: edits and deletions where no rules are given: GATEWAY_ON_EDIT's and GATEWAY_ON_DELETE's
#: defaults
DEFAULT_RULES = ConversationRules()
_SUFFIX = {EventKind.MESSAGE: "", EventKind.EDIT: " edited", EventKind.DELETE: " deleted"}
#: a command counts when the message is for the bot: answered, or answered if engaged
_FOR_US = frozenset({Action.ANSWER, Action.IF_ENGAGED})


def facts_of(envelope: Envelope) -> Facts:
    """What the envelope reports for the policy; without facts, what it says itself (the
    sender, a direct place): nothing addressed, so kept as context unless the place answers
    every message."""
    if envelope.facts is not None:
        return envelope.facts
    return Facts(
        place=envelope.key,
        person=envelope.sender.id,
        direct=envelope.place.direct,
        from_bot=envelope.sender.is_bot,
    )


def _refused(decision: Decision, facts: Facts, kind: EventKind) -> str:
    """An ignored event's reason: the bot's own edit or deletion says which."""
    return decision.reason + _SUFFIX[kind] if facts.from_self else decision.reason


def admit(extracted: Extracted, rules: AnswerRules) -> Extracted:
    """The answer policy applied to one extracted event, the door's whole decision:

    - a message: its trigger decided from its facts (``decide``); its command counts only when
      the message is for the bot (answered, answered if the thread is engaged, or a command
      addressed to it), so a stray ``/new`` in a channel resets nothing;
    - an edit, a deletion or a history row: never answered; only whether it is ours to keep;
    - refused by the policy (the bot's own, outside the allow-lists): ``Ignored`` with the
      reason, also for an event the adapter set aside for its shape but reported facts of;
    - a rejected one, or an ignored one without facts: as it is.

    Idempotent: admitting an admitted event changes nothing."""
    if isinstance(extracted, Rejected):
        return extracted
    if isinstance(extracted, Ignored):
        if extracted.facts is None:
            return extracted
        decision = decide(extracted.facts, rules)
        if not decision.ignored:
            return extracted
        return replace(extracted, reason=_refused(decision, extracted.facts, extracted.kind))
    facts = facts_of(extracted)
    decision = decide(facts, rules)
    if decision.ignored:
        return Ignored(
            platform=extracted.key.platform,
            reason=_refused(decision, facts, extracted.kind),
            event_id=extracted.event_id,
            facts=facts,
            kind=extracted.kind,
        )
    if extracted.kind is not EventKind.MESSAGE or extracted.backfill:
        return replace(extracted, trigger=Trigger.NEVER, facts=facts)
    for_us = decision.action in _FOR_US or facts.command
    return replace(
        extracted,
        trigger=decision.trigger,
        command=extracted.command if for_us else None,
        facts=facts,
    )


class Inbox(Protocol):
    """The store step behind the door (``gateway.inbound.intake.CoreIntake``): stores what
    it is given, deciding nothing."""

    async def submit(
        self, extracted: Extracted, *, raw: Mapping[str, Any] | None
    ) -> IngestOutcome: ...

    async def knows(self, key: SessionKey) -> bool: ...


#: where an edit or deletion carries what it asks of the answer (``follow_up``), for the inbox
FOLLOW_UP = "follow_up"


def follow_up(extracted: Extracted, rules: ConversationRules) -> Extracted:
    """An admitted edit or deletion with what the place's conversation rules ask of the
    answer once its message was answered: ``update`` (written again for the edited text) or
    ``retract`` (deleted with its question). ``context`` and ``keep`` ask nothing: later turns
    read the newest text, without the deleted message, either way."""
    if not isinstance(extracted, Envelope):
        return extracted
    wanted = None
    if extracted.kind is EventKind.EDIT and rules.on_edit == "update":
        wanted = "update"
    elif extracted.kind is EventKind.DELETE and rules.on_delete == "retract":
        wanted = "retract"
    if wanted is None:
        return extracted
    return replace(extracted, metadata={**extracted.metadata, FOLLOW_UP: wanted})


class Door:
    """The ``Ingest`` of one surface: ``admit`` with the rules its plugin declares, then the
    inbox. The composition root builds one per adapter; the adapter holds nothing else that
    stores a message. ``conversation``: a place's rules for edits and deletions (its
    profile's, else the settings'); without it, the defaults."""

    def __init__(
        self,
        inbox: Inbox,
        rules: AnswerRules,
        *,
        burst_of: Callable[[SessionKey], float] | None = None,
        conversation: Callable[[SessionKey], ConversationRules] | None = None,
    ) -> None:
        self._inbox = inbox
        self.rules = rules
        #: the place's burst window in seconds (its profile's ``burst_seconds``, else
        #: ``GATEWAY_BURST_SECONDS``); 0: a turn starts at once
        self._burst_of = burst_of
        self._conversation = conversation

    def admit(self, extracted: Extracted) -> Extracted:
        return admit(extracted, self.rules)

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        admitted = admit(extracted, self.rules)
        if isinstance(admitted, Envelope) and admitted.kind is not EventKind.MESSAGE:
            place = admitted.key
            rules = DEFAULT_RULES if self._conversation is None else self._conversation(place)
            admitted = follow_up(admitted, rules)
        return await self._inbox.submit(self._with_burst(admitted), raw=raw)

    def _with_burst(self, extracted: Extracted) -> Extracted:
        """A message that asks for an answer carries the place's burst window, which its
        ingest writes as the turn's not-before time (no statement of its own). ``/stop``
        never waits: it is for the answer being written now."""
        if (
            self._burst_of is None
            or not isinstance(extracted, Envelope)
            or extracted.kind is not EventKind.MESSAGE
            or extracted.command == "stop"
        ):
            return extracted
        seconds = self._burst_of(extracted.key)
        return replace(extracted, burst_seconds=seconds) if seconds > 0 else extracted

    async def knows(self, key: SessionKey) -> bool:
        return await self._inbox.knows(key)


@dataclass(frozen=True, slots=True)
class SurfaceIntake:
    """The ``Intake`` one adapter gets at start: its door, and the core's cursors,
    interactions, lifecycle and places' profiles, each answering for its own part."""

    ingest: Ingest
    cursors: Cursors
    interactions: Interactions
    lifecycle: Lifecycle
    places: Places

    def admit(self, extracted: Extracted) -> Extracted:
        return self.ingest.admit(extracted)

    async def submit(self, extracted: Extracted, *, raw: Mapping[str, Any] | None) -> IngestOutcome:
        return await self.ingest.submit(extracted, raw=raw)

    async def knows(self, key: SessionKey) -> bool:
        return await self.ingest.knows(key)

    async def load_cursor(self, name: str) -> str | None:
        return await self.cursors.load_cursor(name)

    async def save_cursor(self, name: str, value: str) -> None:
        await self.cursors.save_cursor(name, value)

    async def record_feedback(
        self, *, platform: str, chat_id: str, message_id: str, user_id: str, value: int
    ) -> bool:
        return await self.interactions.record_feedback(
            platform=platform, chat_id=chat_id, message_id=message_id, user_id=user_id, value=value
        )

    async def approval_click(self, click: ApprovalClick) -> ClickOutcome:
        return await self.interactions.approval_click(click)

    async def stop_answer(self, *, platform: str, chat_id: str, message_id: str) -> bool:
        return await self.interactions.stop_answer(
            platform=platform, chat_id=chat_id, message_id=message_id
        )

    def profile(self, key: SessionKey) -> Profile:
        return self.places.profile(key)

    async def lead(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        await self.lifecycle.lead(name, body, stopping=stopping)

    async def supervise(
        self,
        name: str,
        body: Callable[[], Coroutine[Any, Any, None]],
        *,
        stopping: asyncio.Event | None = None,
    ) -> None:
        await self.lifecycle.supervise(name, body, stopping=stopping)


# --- the steps every surface shares ----------------------------------------------------------


def extract_safely(
    extract: Callable[[], Extracted], *, platform: str, event_id: str | None = None
) -> Extracted:
    """``extract()``, or a ``Rejected`` naming the exception if it raised: extraction is pure
    code over untrusted input, and a bug in it must not stop ingress."""
    try:
        return extract()
    except Exception as exc:  # broad on purpose: any bug in extraction becomes a dead letter
        log.exception("extract_bug", platform=platform, event_id=event_id)
        return Rejected(
            platform=platform,
            reason=f"extraction failed: {type(exc).__name__}: {exc}",
            event_id=event_id,
        )


async def record_reaction(
    intake: Interactions, *, platform: str, reaction: Callable[[], Reaction | None]
) -> None:
    """A thumbs up/down on one of the bot's messages is that message's feedback (the core
    ignores reactions on other messages). ``reaction()`` reads it from the payload; a bug in
    it loses the feedback, never the event."""
    try:
        found = reaction()
    except Exception:  # broad on purpose: pure code over untrusted input, like extraction
        log.exception("reaction_extract_bug", platform=platform)
        return
    if found is None:
        return
    if found.stop:
        await intake.stop_answer(
            platform=platform, chat_id=found.chat_id, message_id=found.message_id
        )
        return
    await intake.record_feedback(
        platform=platform,
        chat_id=found.chat_id,
        message_id=found.message_id,
        user_id=found.user_id,
        value=found.value,
    )


def refusal(ingest: Ingest, *, place: SessionKey, person: str) -> str | None:
    """Why the door would not answer ``person`` writing to the bot directly in ``place``, or
    ``None`` when it would: for a surface that must decide something before any message
    (accept a room invitation, join a server) without deciding who is welcome itself. The
    answer policy's own verdict on such a message (allow-lists of places and people)."""
    probe = Envelope(
        key=place,
        target=ReplyTarget(platform=place.platform, scope=place.scope, chat_id=place.chat_id),
        message_id="",
        text="",
        sender=Sender(id=person),
        facts=Facts(place=place, person=person, direct=True),
    )
    verdict = ingest.admit(probe)
    return verdict.reason if isinstance(verdict, Ignored) else None


class _IngestWithFeedback(Ingest, Interactions, Protocol):
    """What ``ingest`` uses: the door, and the feedback a reaction carries."""


async def ingest(
    intake: _IngestWithFeedback,
    *,
    platform: str,
    raw: Mapping[str, Any],
    extract: Callable[[], Extracted],
    reaction: Callable[[], Reaction | None] | None = None,
    event_id: str | None = None,
    submit: Callable[[Extracted], Awaitable[IngestOutcome]] | None = None,
) -> tuple[Extracted, IngestOutcome]:
    """Extract safely, let the door decide (``Ingest.admit``), record the feedback
    ``reaction()`` finds, then submit, storing ``raw``. Returns the event as decided.

    ``event_id`` names the dead letter if extraction fails. ``submit`` replaces the plain
    ``intake.submit(extracted, raw=raw)`` for an adapter that must do more around it (Slack
    stores a thread's history before an answered message), and gets the decided event.
    Raises when the event could not be stored: the caller answers with the platform's
    retry."""
    extracted = intake.admit(extract_safely(extract, platform=platform, event_id=event_id))
    if reaction is not None:
        await record_reaction(intake, platform=platform, reaction=reaction)
    if submit is None:
        outcome = await intake.submit(extracted, raw=raw)
    else:
        outcome = await submit(extracted)
    return extracted, outcome


@dataclass(frozen=True, slots=True)
class JsonBody:
    """A request body that parsed as JSON."""

    value: Any


async def json_body(
    intake: Ingest,
    body: bytes,
    *,
    platform: str,
    error: Mapping[str, Any],
    object_only: bool = False,
) -> JsonBody | Response:
    """Parse a webhook body. One that is not JSON (or, with ``object_only``, not a JSON
    object) is stored as a ``Rejected`` dead letter keeping the start of the body, and
    answered 400 with ``error`` (a sender that cannot be parsed is not worth a retry).
    Raises when that dead letter cannot be stored."""
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: deep nesting
        reason = "request body is not JSON"
    else:
        if not object_only or isinstance(value, dict):
            return JsonBody(value)
        reason = "request body is not a JSON object"
    raw = {"body": body.decode("utf-8", errors="replace")[:BODY_KEPT]}
    await intake.submit(Rejected(platform=platform, reason=reason), raw=raw)
    return JSONResponse(dict(error), status_code=400)
