"""The bolt app both Slack ingress paths dispatch into, built around the shared ingest
(``SlackIngest``): its listeners store an event, decide an approval press and record what no
listener took, and what each answers decides the ack (``process_before_response``: HTTP 200
or the Socket Mode ack only after the listener returned, so only after the store
committed)."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltRequest
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.blocks import FEEDBACK_ACTION
from adapters.slack.extract import PLATFORM
from adapters.slack.ingest import SlackIngest
from adapters.slack.transport import APPROVE_ACTION, DENY_ACTION
from gateway.core.domain import Ignored, Rejected
from gateway.core.ports import Intake

log = structlog.get_logger(__name__)

#: keys our requests carry in bolt's context
ROUTE_KEY = "gateway_route"
ENVELOPE_KEY = "gateway_envelope_type"
ENVELOPE_ID_KEY = "gateway_envelope_id"
#: what bolt's request parser raises on a body of an odd shape (not JSON, a list, a field of
#: another type): ``json.loads``, then ``.get``/``in`` on whatever the fields hold
#: (and, from ``async_dispatch``, ``"type" in body["event"]`` on an ``event`` that is a
#: number); a body nested past Python's recursion limit raises RecursionError
UNREADABLE = (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)


def _request_log(request: AsyncBoltRequest) -> dict[str, Any]:
    """The retry markers of one request, for the one log line it gets."""
    fields: dict[str, Any] = {"mode": request.mode}
    for header in ("x-slack-retry-num", "x-slack-retry-reason"):
        values = request.headers.get(header)
        if values:
            fields[header.removeprefix("x-slack-").replace("-", "_")] = values[0]
    envelope_id = request.context.get(ENVELOPE_ID_KEY)
    if envelope_id is not None:
        fields["envelope_id"] = envelope_id
    return fields


class _ClientWinsNotice(logging.Filter):
    """Drops one start-up warning: bolt reads ``SLACK_BOT_TOKEN`` from the environment by
    itself and warns that the client we pass wins. It does, on purpose: that client carries
    no token (``build_app``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


def build_app(ingest: SlackIngest, *, base_url: str, secret: str | None) -> AsyncApp:
    """The bolt app both ingress paths dispatch into, its listeners around ``ingest``.

    * ``process_before_response=True``: bolt acks (HTTP 200, Socket Mode ack) only after
      the listener returned, i.e. after our ingest committed; a listener that returns a
      non-200 ``BoltResponse`` gets no Socket Mode ack and Slack redelivers.
    * ``authorize`` answers from the identity ``auth.test`` gave at start: no Web API
      call per request, and never bolt's "please reinstall" 200 for an event it did not
      hand to a listener (``SingleTeamAuthorization`` answers that when its lazy
      ``auth.test`` fails).
    * The own-bot filter, ssl_check and the assistant middleware are off: extraction owns
      which messages are answered and records the rest as ignored.
    * ``raise_error_for_unhandled_request``: what no listener takes (slash commands,
      other interactions, ``app_rate_limited``) reaches ``_on_error`` and is
      recorded before it is acked; bolt's default is a 404, which Slack would retry.
    """
    bolt_log = logging.getLogger("adapters.slack.bolt")
    if not any(isinstance(f, _ClientWinsNotice) for f in bolt_log.filters):
        bolt_log.addFilter(_ClientWinsNotice())
    app = AsyncApp(
        name="gateway-slack",
        logger=bolt_log,
        client=AsyncWebClient(base_url=base_url),  # no token: nothing calls out
        signing_secret=secret or "unused-in-socket-mode",
        request_verification_enabled=secret is not None,
        authorize=_authorizer(ingest),
        process_before_response=True,
        raise_error_for_unhandled_request=True,
        ignoring_self_events_enabled=False,
        ignoring_self_assistant_message_events_enabled=False,
        ssl_check_enabled=False,
        attaching_function_token_enabled=False,
        attaching_conversation_kwargs_enabled=False,
    )
    # bolt injects arguments by parameter name: plain functions, each handing on the ingest

    async def on_event(body: dict[str, Any], request: AsyncBoltRequest) -> BoltResponse | None:
        return await _on_event(ingest, body, request)

    async def on_approval(
        ack: AsyncAck, body: dict[str, Any], request: AsyncBoltRequest
    ) -> BoltResponse | None:
        return await _on_press(
            ingest,
            ack,
            body,
            request,
            press=ingest.approval_press,
            unusable="approval press without an approval id",
            failed="slack_approval_failed",
        )

    async def on_feedback(
        ack: AsyncAck, body: dict[str, Any], request: AsyncBoltRequest
    ) -> BoltResponse | None:
        return await _on_press(
            ingest,
            ack,
            body,
            request,
            press=ingest.feedback_press,
            unusable="feedback press without a value",
            failed="slack_feedback_failed",
        )

    async def on_error(
        error: Exception, body: dict[str, Any], request: AsyncBoltRequest
    ) -> BoltResponse:
        return await _on_error(ingest, error, body, request)

    app.event(re.compile(".*"))(on_event)
    app.action(APPROVE_ACTION)(on_approval)
    app.action(DENY_ACTION)(on_approval)
    app.action(FEEDBACK_ACTION)(on_feedback)
    app.error(on_error)
    return app


def _authorizer(ingest: SlackIngest) -> Callable[..., Awaitable[AuthorizeResult]]:
    async def authorize(team_id: str | None) -> AuthorizeResult:
        me = ingest.me
        return AuthorizeResult(
            enterprise_id=None,
            team_id=team_id,
            bot_user_id=me.user_id if me else None,
            bot_id=me.bot_id if me else None,
        )

    return authorize


async def _on_event(
    ingest: SlackIngest, body: dict[str, Any], request: AsyncBoltRequest
) -> BoltResponse | None:
    ready = ingest.ready()
    if ready is None:
        return BoltResponse(status=503, body={"error": "not ready"})
    intake, me = ready
    try:
        extracted, outcome = await ingest.ingest(body, intake, me)
    except Exception:  # broad on purpose: the store failed: no ack, Slack retries later
        log.exception("slack_ingest_failed", **_request_log(request))
        return BoltResponse(status=503, body={"error": "not stored"})
    log.info("slack_event_ingested", status=outcome.status, **_request_log(request))
    if isinstance(extracted, Rejected) and request.mode == "http":
        # stored as a dead letter; the status tells the sender the body was unusable
        # (in Socket Mode the dead letter is acked: a redelivery would not help)
        return BoltResponse(status=400, body={"error": extracted.reason})
    return None


async def _on_press(
    ingest: SlackIngest,
    ack: AsyncAck,
    body: dict[str, Any],
    request: AsyncBoltRequest,
    *,
    press: Callable[[dict[str, Any], Intake], Awaitable[bool]],
    unusable: str,
    failed: str,
) -> BoltResponse | None:
    """A button press, handed to the core by ``press`` (an approval decided, one row update;
    an answer's feedback recorded in the feedback table), then acked. A press ``press`` finds
    nothing in is kept as ``unusable``. Not stored: no ack, the person may press again."""
    intake = ingest.intake
    if intake is None:
        return BoltResponse(status=503, body={"error": "not ready"})
    try:
        if not await press(body, intake):
            await intake.submit(Ignored(platform=PLATFORM, reason=unusable), raw=body)
    except Exception:  # broad on purpose: not decided or recorded, so not acked
        log.exception(failed, **_request_log(request))
        return BoltResponse(status=503, body={"error": "not stored"})
    await ack()
    return None


async def _on_error(
    ingest: SlackIngest, error: Exception, body: dict[str, Any], request: AsyncBoltRequest
) -> BoltResponse:
    """What no listener took, and what bolt itself failed on: recorded, then acked
    (an error here is a payload that will never work: a dead letter, invariant 7)."""
    ready = ingest.ready()
    if ready is None:
        return BoltResponse(status=503, body={"error": "not ready"})
    intake, _ = ready
    envelope = request.context.get(ENVELOPE_KEY)
    try:
        if not isinstance(error, BoltUnhandledRequestError):
            log.error("slack_bolt_failed", error=type(error).__name__, **_request_log(request))
            await intake.submit(
                Rejected(platform=PLATFORM, reason=f"unreadable request: {error!r}"[:500]),
                raw=body,
            )
            status = 400 if request.mode == "http" else 200
            return BoltResponse(status=status, body={"error": "unreadable request"})
        if envelope not in (None, "events_api"):
            outcome = await intake.submit(
                Ignored(platform=PLATFORM, reason=f"socket mode {envelope}"), raw=body
            )
            log.info("slack_event_ingested", status=outcome.status, **_request_log(request))
            return BoltResponse(status=200, body="")
        if request.context.get(ROUTE_KEY) == "interactions":
            kind = body.get("type")
            outcome = await intake.submit(
                Ignored(platform=PLATFORM, reason=f"interaction {str(kind)[:40]}"), raw=body
            )
            log.info("slack_event_ingested", status=outcome.status, **_request_log(request))
            return BoltResponse(status=200, body="")
    except Exception:  # broad on purpose: the store failed: no ack, Slack retries later
        log.exception("slack_ingest_failed", **_request_log(request))
        return BoltResponse(status=503, body={"error": "not stored"})
    # an Events API body that is not an event_callback (app_rate_limited, ...)
    return await _on_event(ingest, body, request) or BoltResponse(status=200, body="")
