"""Slack's Events API ingress: ``POST /slack/events`` and ``POST /slack/interactions``, signed
requests dispatched into the bolt app (signature checked over the raw bytes by bolt); a body
bolt cannot read is verified here and kept as a dead letter. An object built around the
shared ingest (``SlackIngest``) and the bolt app, which it takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from slack_bolt.adapter.starlette.async_handler import to_starlette_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_sdk.signature import SignatureVerifier
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapters.slack.bolt_app import ROUTE_KEY, UNREADABLE
from adapters.slack.extract import PLATFORM, BotIdentity
from adapters.slack.ingest import SlackIngest
from gateway.core.domain import Rejected
from gateway.core.ports import Intake
from gateway.inbound.ingress import json_body

log = structlog.get_logger(__name__)


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


class EventsApiIngress:
    """The HTTP routes of ``SlackAdapter`` (when ``SLACK_SIGNING_SECRET`` is set)."""

    def __init__(self, ingest: SlackIngest, app: AsyncApp, verifier: SignatureVerifier) -> None:
        self._ingest = ingest
        self._app = app
        self._verifier = verifier

    def http_routes(self) -> Sequence[Any]:
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
        ready = self._ingest.ready()
        if ready is None:
            return JSONResponse({"error": "not ready"}, status_code=503)
        intake, me = ready
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
            extracted, _ = await self._ingest.ingest(parsed.value, intake, me)
        except Exception:  # broad on purpose: the store failed: 503 so Slack retries later
            log.exception("slack_ingest_failed")
            return JSONResponse({"error": "not stored"}, status_code=503)
        if isinstance(extracted, Rejected):
            return JSONResponse({"error": extracted.reason}, status_code=400)
        return Response(status_code=200)
