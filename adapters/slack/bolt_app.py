"""Slack's HTTP ingress and the bolt app both ingress paths dispatch into: ``POST
/slack/events`` and ``POST /slack/interactions`` (signature checked over the raw bytes by
bolt; a body bolt cannot read is verified here and kept as a dead letter), and the listeners
that store an event, decide an approval press and record what no listener took."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog
from slack_bolt.adapter.starlette.async_handler import to_starlette_response
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltRequest
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapters.slack.extract import PLATFORM, BotIdentity, approval_action_of
from adapters.slack.ingest import SlackIngress
from adapters.slack.transport import APPROVE_ACTION, DENY_ACTION
from gateway.core.domain import Ignored, Rejected, ReplyTarget
from gateway.core.ports import ApprovalClick, Intake
from gateway.inbound.ingress import json_body

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


def readable_signature_headers(headers: Headers | Mapping[str, str]) -> bool:
    """False when slack_sdk's verifier would raise instead of answering: a timestamp that is
    not ASCII digits (``int()``) or a signature with non-ASCII characters
    (``hmac.compare_digest`` raises TypeError on those). Missing headers are fine: the
    verifier rejects them."""
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    if timestamp is not None and not (
        timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12
    ):
        return False
    return signature is None or signature.isascii()


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
    no token (``SlackAdapter._build_app``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != warning_client_prioritized_and_token_skipped()


class BoltIngress(SlackIngress):
    """``SlackAdapter``'s HTTP routes and bolt listeners (HTTP and Socket Mode alike)."""

    _base_url: str
    _verifier: SignatureVerifier | None
    _app: AsyncApp

    def http_routes(self) -> Sequence[Any]:
        if self._verifier is None:
            return []  # Socket Mode only: no public endpoint to protect
        return [
            Route("/slack/events", self._handle_events, methods=["POST"]),
            # approval buttons; Slack's "Interactivity Request URL"
            Route("/slack/interactions", self._handle_interactions, methods=["POST"]),
        ]

    async def _handle_events(self, request: Request) -> Response:
        return await self._handle_http(request, route="events")

    async def _handle_interactions(self, request: Request) -> Response:
        return await self._handle_http(request, route="interactions")

    def _signature_ok(self, text: str, request: Request) -> bool:
        """Our own check, only for a body bolt cannot read (see ``_handle_http``); the same
        slack_sdk verifier bolt's ``RequestVerification`` uses (5-minute window, constant
        time). Call only after ``readable_signature_headers``."""
        assert self._verifier is not None
        return self._verifier.is_valid(
            body=text,
            timestamp=request.headers.get("x-slack-request-timestamp"),
            signature=request.headers.get("x-slack-signature"),
        )

    async def _handle_http(self, request: Request, *, route: str) -> Response:
        """One signed POST from Slack, answered only after the listener committed.

        Bolt's ``AsyncBoltRequest`` parses the body in its constructor, before its
        ``RequestVerification`` middleware runs, and raises on a body it cannot read (not
        JSON, a list, a field of an unexpected type); its verifier raises on a non-numeric
        timestamp and a non-ASCII signature. Those few cases are settled here: headers bolt
        cannot read -> 401; a body bolt cannot read -> our verifier, then a dead letter. All
        else goes through bolt: signature (401), url_verification, our listeners."""
        intake, me = self._intake, self._me
        if intake is None or me is None:
            return JSONResponse({"error": "not ready"}, status_code=503)
        body = await request.body()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # Slack signs UTF-8 bodies: this one is not Slack's
        if text is None or not readable_signature_headers(request.headers):
            log.warning("slack_signature_rejected", route=route)
            return JSONResponse({"error": "invalid request"}, status_code=401)
        try:
            bolt_request = AsyncBoltRequest(
                body=text,
                headers=dict(request.headers),
                context={ROUTE_KEY: route},
            )
            # bolt reads the body's fields before any listener, outside its error handler
            response = await self._app.async_dispatch(bolt_request)
        except UNREADABLE:
            return await self._unreadable_http(body, text, request, route, intake, me)
        if response.status == 401:
            log.warning("slack_signature_rejected", route=route)
        return to_starlette_response(response)

    async def _unreadable_http(
        self,
        body: bytes,
        text: str,
        request: Request,
        route: str,
        intake: Intake,
        me: BotIdentity,
    ) -> Response:
        if not self._signature_ok(text, request):
            log.warning("slack_signature_rejected", route=route)
            return JSONResponse({"error": "invalid request"}, status_code=401)
        if route == "interactions":
            return JSONResponse({"error": "malformed interaction"}, status_code=400)
        try:
            parsed = await json_body(
                intake, body, platform=PLATFORM, error={"error": "malformed JSON"}, object_only=True
            )
            if isinstance(parsed, Response):
                return parsed
            # a JSON object with a field bolt did not expect: our extraction decides
            extracted, _ = await self._ingest(parsed.value, intake, me)
        except Exception:  # broad on purpose: the store failed: 503 so Slack retries later
            log.exception("slack_ingest_failed")
            return JSONResponse({"error": "not stored"}, status_code=503)
        if isinstance(extracted, Rejected):
            return JSONResponse({"error": extracted.reason}, status_code=400)
        return Response(status_code=200)

    def _build_app(self, secret: str | None) -> AsyncApp:
        """The bolt app both ingress paths dispatch into.

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
          other interactions, ``app_rate_limited``) reaches ``_on_bolt_error`` and is
          recorded before it is acked; bolt's default is a 404, which Slack would retry.
        """
        bolt_log = logging.getLogger("adapters.slack.bolt")
        if not any(isinstance(f, _ClientWinsNotice) for f in bolt_log.filters):
            bolt_log.addFilter(_ClientWinsNotice())
        app = AsyncApp(
            name="gateway-slack",
            logger=bolt_log,
            client=AsyncWebClient(base_url=self._base_url),  # no token: nothing calls out
            signing_secret=secret or "unused-in-socket-mode",
            request_verification_enabled=secret is not None,
            authorize=self._authorizer(),
            process_before_response=True,
            raise_error_for_unhandled_request=True,
            ignoring_self_events_enabled=False,
            ignoring_self_assistant_message_events_enabled=False,
            ssl_check_enabled=False,
            attaching_function_token_enabled=False,
            attaching_conversation_kwargs_enabled=False,
        )
        # bolt injects arguments by parameter name and counts a bound method's ``self`` as
        # one: plain functions forward to the methods

        async def on_event(body: dict[str, Any], request: AsyncBoltRequest) -> BoltResponse | None:
            return await self._ingest_for_bolt(body, request)

        async def on_approval(
            ack: AsyncAck, body: dict[str, Any], request: AsyncBoltRequest
        ) -> BoltResponse | None:
            return await self._on_bolt_approval(ack, body, request)

        async def on_error(
            error: Exception, body: dict[str, Any], request: AsyncBoltRequest
        ) -> BoltResponse:
            return await self._on_bolt_error(error, body, request)

        app.event(re.compile(".*"))(on_event)
        app.action(APPROVE_ACTION)(on_approval)
        app.action(DENY_ACTION)(on_approval)
        app.error(on_error)
        return app

    def _authorizer(self) -> Callable[..., Awaitable[AuthorizeResult]]:
        async def authorize(team_id: str | None) -> AuthorizeResult:
            me = self._me
            return AuthorizeResult(
                enterprise_id=None,
                team_id=team_id,
                bot_user_id=me.user_id if me else None,
                bot_id=me.bot_id if me else None,
            )

        return authorize

    async def _ingest_for_bolt(
        self, body: dict[str, Any], request: AsyncBoltRequest
    ) -> BoltResponse | None:
        intake, me = self._intake, self._me
        if intake is None or me is None:
            return BoltResponse(status=503, body={"error": "not ready"})
        try:
            extracted, outcome = await self._ingest(body, intake, me)
        except Exception:  # broad on purpose: the store failed: no ack, Slack retries later
            log.exception("slack_ingest_failed", **_request_log(request))
            return BoltResponse(status=503, body={"error": "not stored"})
        log.info("slack_event_ingested", status=outcome.status, **_request_log(request))
        if isinstance(extracted, Rejected) and request.mode == "http":
            # stored as a dead letter; the status tells the sender the body was unusable
            # (in Socket Mode the dead letter is acked: a redelivery would not help)
            return BoltResponse(status=400, body={"error": extracted.reason})
        return None

    async def _on_bolt_approval(
        self, ack: AsyncAck, body: dict[str, Any], request: AsyncBoltRequest
    ) -> BoltResponse | None:
        """An approval button: decided by the core (one row update), then acked."""
        intake = self._intake
        if intake is None:
            return BoltResponse(status=503, body={"error": "not ready"})
        try:
            if not await self._on_interaction(body, intake):
                await intake.submit(
                    Ignored(platform=PLATFORM, reason="approval press without an approval id"),
                    raw=body,
                )
        except Exception:  # broad on purpose: not decided: no ack, the person may press again
            log.exception("slack_approval_failed", **_request_log(request))
            return BoltResponse(status=503, body={"error": "not stored"})
        await ack()
        return None

    async def _on_bolt_error(
        self, error: Exception, body: dict[str, Any], request: AsyncBoltRequest
    ) -> BoltResponse:
        """What no listener took, and what bolt itself failed on: recorded, then acked
        (an error here is a payload that will never work: a dead letter, invariant 7)."""
        intake, me = self._intake, self._me
        if intake is None or me is None:
            return BoltResponse(status=503, body={"error": "not ready"})
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
        return await self._ingest_for_bolt(body, request) or BoltResponse(status=200, body="")

    async def _on_interaction(self, payload: Mapping[str, Any], intake: Intake) -> bool:
        """Decide an approval press (HTTP or Socket Mode ``interactive``); tell only the
        presser when it was not theirs to decide. ``False``: not an approval press."""
        press = approval_action_of(payload, approve_action=APPROVE_ACTION, deny_action=DENY_ACTION)
        if press is None:
            return False
        outcome = await intake.approval_click(
            ApprovalClick(
                platform=PLATFORM,
                approval_id=press.approval_id,
                user_id=press.user_id,
                approve=press.approve,
                chat_id=press.channel_id,
                thread_id=press.thread_ts,
                message_id=press.message_ts,
            )
        )
        log.info("slack_approval_press", outcome=outcome.outcome)
        if outcome.outcome not in ("approved", "denied"):
            await self.transport.notify(
                ReplyTarget(
                    platform=PLATFORM,
                    scope=(self._me.team_id if self._me else None) or "",
                    chat_id=press.channel_id,
                    thread_id=press.thread_ts,
                ),
                press.user_id,
                outcome.message,
            )
        return True
