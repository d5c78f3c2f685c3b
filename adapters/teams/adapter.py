"""``TeamsAdapter``: ``POST /teams/messages`` in (each request's JWT checked first), the
connector out (``transport.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from microsoft_agents.activity import Activity
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapters.teams.auth import AuthError, BotFrameworkAuth, KeysUnavailable, OpenIdKeys
from adapters.teams.check import check_app
from adapters.teams.extract import (
    PLATFORM,
    card_press,
    extract_activity,
    parse_activity,
    reaction_of,
    tenant_of,
)
from adapters.teams.settings import TeamsSettings
from adapters.teams.tokens import TokenSource
from adapters.teams.transport import TeamsTransport
from gateway.core.domain import Rejected
from gateway.core.errors import ConfigError
from gateway.core.ports import ApprovalClick, Check, Intake
from gateway.inbound.ingress import BODY_KEPT, ingest

log = structlog.get_logger(__name__)

MESSAGES_PATH = "/teams/messages"
#: the answer an ``adaptiveCard/action`` invoke gets: a message shown to the presser
INVOKE_MESSAGE = "application/vnd.microsoft.activity.message"


class TeamsAdapter:
    """``PlatformAdapter`` for Microsoft Teams: one bot (app registration)."""

    platform = PLATFORM

    def __init__(self, settings: TeamsSettings, *, key_refetch_interval: float = 5.0) -> None:
        if not settings.teams_app_id or settings.teams_app_password is None:
            raise ConfigError("TEAMS_APP_ID", "TEAMS_APP_ID and TEAMS_APP_PASSWORD enable Teams")
        self._app_id = settings.teams_app_id
        self.tokens = TokenSource(
            settings.token_url(),
            app_id=self._app_id,
            password=settings.teams_app_password.get_secret_value(),
        )
        self.transport = TeamsTransport(self.tokens)
        self.keys = OpenIdKeys(
            settings.teams_openid_metadata_url, refetch_interval=key_refetch_interval
        )
        self.auth = BotFrameworkAuth(
            self.keys, app_id=self._app_id, tenant_id=settings.teams_tenant_id
        )
        self._intake: Intake | None = None

    def http_routes(self) -> Sequence[Any]:
        return [Route(MESSAGES_PATH, self._handle, methods=["POST"])]

    async def start(self, intake: Intake) -> None:
        self._intake = intake
        log.info("teams_started", app_id=self._app_id)

    async def stop(self) -> None:
        self._intake = None  # requests answer 503 from now on: Bot Framework retries
        await self.transport.close()
        log.info("teams_stopped")

    async def check(self) -> Sequence[Check]:
        return await check_app(self.tokens, self.keys, app_id=self._app_id)

    # --- inbound ------------------------------------------------------------------------------

    async def _handle(self, request: Request) -> Response:
        intake = self._intake
        if intake is None:
            return JSONResponse({"error": "not ready"}, status_code=503)
        body = await request.body()
        try:
            payload: Any = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            payload = None
        fields: Mapping[str, Any] = payload if isinstance(payload, dict) else {}
        service_url = fields.get("serviceUrl")
        channel_id = fields.get("channelId")
        try:
            # nothing of the body is believed, or stored, before its token is checked
            await self.auth.verify(
                request.headers.get("authorization"),
                service_url=service_url if isinstance(service_url, str) else None,
                channel_id=channel_id if isinstance(channel_id, str) else None,
            )
        except KeysUnavailable:
            # not the sender's fault: Bot Framework retries a 503
            return JSONResponse({"error": "signing keys unavailable"}, status_code=503)
        except AuthError as exc:
            log.warning("teams_request_refused", reason=str(exc))
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        try:
            activity = parse_activity(fields)
        except ValueError as exc:
            await intake.submit(
                Rejected(platform=PLATFORM, reason=str(exc)),
                raw={"body": body.decode("utf-8", errors="replace")[:BODY_KEPT]},
            )
            return JSONResponse({"error": "not an activity"}, status_code=400)
        if activity.service_url:
            self.transport.service_urls[tenant_of(activity)] = activity.service_url
        try:
            if activity.type == "invoke" and activity.name == "adaptiveCard/action":
                return await self._press(activity, intake)
            extracted, _ = await ingest(
                intake,
                platform=PLATFORM,
                raw=fields,
                extract=lambda: extract_activity(activity),
                reaction=lambda: reaction_of(activity),
                event_id=activity.id,
            )
        except Exception:  # broad on purpose: the store failed: 503 so Bot Framework retries
            log.exception("teams_ingest_failed")
            return JSONResponse({"error": "not stored"}, status_code=503)
        if isinstance(extracted, Rejected):
            return JSONResponse({"error": extracted.reason}, status_code=400)
        if activity.type == "invoke":
            return JSONResponse({"status": 200})  # feedback, or an invoke we do not serve
        return Response(status_code=200)

    async def _press(self, activity: Activity, intake: Intake) -> Response:
        """An approval card's button: the core checks the place, the card and the person and
        decides once; the presser is told the outcome in the card's own invoke answer."""
        press = card_press(activity)
        if press is None:
            return _invoke_message("This card is not one of mine.")
        outcome = await intake.approval_click(
            ApprovalClick(
                platform=PLATFORM,
                approval_id=press.approval_id,
                user_id=press.person,
                approve=press.approve,
                chat_id=press.chat_id,
                thread_id=press.thread_id,
                message_id=press.message_id,
            )
        )
        log.info("teams_approval_press", outcome=outcome.outcome)
        return _invoke_message(outcome.message)


def _invoke_message(text: str) -> Response:
    return JSONResponse({"statusCode": 200, "type": INVOKE_MESSAGE, "value": text})
