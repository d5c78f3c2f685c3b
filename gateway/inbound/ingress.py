"""The ingress steps every surface shares, written once; each adapter keeps only its own
transport (where events come from, how the platform is told "received" or "try again").

One inbound event: extract safely (a bug in extraction becomes a ``Rejected`` dead letter
with the reason, never a stuck queue: architecture invariant 7), record the reaction it
carries as feedback, then submit. ``ingest`` returns only after the submit committed; when
it raises, nothing was stored and the adapter answers with the platform's retry (HTTP 500,
no Socket Mode ack, the offset not moved, the post held for a resync).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from starlette.responses import JSONResponse, Response

from gateway.core.domain import Extracted, Reaction, Rejected
from gateway.core.ports import IngestOutcome, Intake

log = structlog.get_logger(__name__)

#: how much of an unreadable request body the dead letter keeps (characters)
BODY_KEPT = 65536


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
    intake: Intake, *, platform: str, reaction: Callable[[], Reaction | None]
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
    await intake.record_feedback(
        platform=platform,
        chat_id=found.chat_id,
        message_id=found.message_id,
        user_id=found.user_id,
        value=found.value,
    )


async def ingest(
    intake: Intake,
    *,
    platform: str,
    raw: Mapping[str, Any],
    extract: Callable[[], Extracted],
    reaction: Callable[[], Reaction | None] | None = None,
    event_id: str | None = None,
    submit: Callable[[Extracted], Awaitable[IngestOutcome]] | None = None,
) -> tuple[Extracted, IngestOutcome]:
    """Extract safely, record the feedback ``reaction()`` finds, then submit, storing ``raw``.

    ``event_id`` names the dead letter if extraction fails. ``submit`` replaces the plain
    ``intake.submit(extracted, raw=raw)`` for an adapter that must do more around it (Slack
    stores a thread's history before its first message). Raises when the event could not be
    stored: the caller answers with the platform's retry."""
    extracted = extract_safely(extract, platform=platform, event_id=event_id)
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
    intake: Intake,
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
