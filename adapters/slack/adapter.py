"""Slack ingress on slack-bolt (Events API over HTTP, Socket Mode, interactivity) and the
adapter lifecycle. Replies go out through our own ``SlackTransport`` (slack_sdk's
``AsyncWebClient``), never through bolt's ``say``.

Ingress rules (architecture invariants 2, 3, 7; platforms.md §2.2-§2.7):

* Both paths dispatch into one bolt ``AsyncApp`` built with ``process_before_response=True``:
  bolt answers Slack (HTTP 200 / the Socket Mode ack) only after our listener returned, and our
  listener returns only after ``intake.submit`` committed. A failed store makes the listener
  return 503: HTTP answers 503 and Socket Mode sends no ack, so Slack retries.
* HTTP: ``POST /slack/events`` and ``POST /slack/interactions``. Bolt's request verification
  checks the signature over the raw bytes (bad or older than 5 minutes -> 401, nothing
  stored) and answers ``url_verification``. A body bolt cannot parse is verified here and
  kept as a ``Rejected`` dead letter (400). Unknown event types get a 200 too (a 404 would
  make Slack retry, §2.4).
* Socket Mode (when ``SLACK_APP_TOKEN`` is set): bolt's ``AsyncSocketModeHandler`` on
  slack_sdk's aiohttp client, run through ``Intake.supervise`` (every replica, restarted with
  backoff, replaced when it stays disconnected); an envelope bolt cannot read is a dead
  letter and acked.
* Retries (``X-Slack-Retry-Num``, Socket Mode ``retry_attempt``) and the app_mention + message
  pair are submitted like any event: the core's inbox dedupes on ``event_id`` and on
  ``(channel, ts)`` — extraction sets both.
* First contact inside an existing thread: the thread's earlier messages are fetched with
  ``conversations.replies`` and submitted first as backfill rows (context, never answered).

This module is the lifecycle (identity, start, stop, checks). The adapter holds its parts, each
an object with the state it owns: the ingest both paths share (``ingest.py``: the intake and
identity bound at start, extraction into the inbox, backfill, approval presses), the bolt app
built around it (``bolt_app.py``: the listeners that decide each ack), and around those the
Events API ingress (``events_api.py``) and the Socket Mode ingress (``socket_mode.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from adapters.slack.bolt_app import build_app
from adapters.slack.check import check_tokens
from adapters.slack.events_api import EventsApiIngress
from adapters.slack.extract import PLATFORM, BotIdentity
from adapters.slack.ingest import SlackIngest
from adapters.slack.settings import SlackSettings
from adapters.slack.socket_mode import SocketModeIngress
from adapters.slack.transport import SlackTransport, make_web_client
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.ports import Check, Intake

log = structlog.get_logger(__name__)

#: the Web API timeout (seconds); a send that times out is reported as ambiguous
WEB_TIMEOUT_SECONDS = 10


class SlackAdapter:
    """``PlatformAdapter`` for Slack: one bot token (one workspace), HTTP and/or Socket Mode."""

    platform = PLATFORM

    def __init__(
        self,
        settings: SlackSettings,
    ) -> None:
        if settings.slack_bot_token is None:
            raise ConfigError("SLACK_BOT_TOKEN", "required to enable Slack")
        self._base_url = settings.slack_api_base_url
        self._client = make_web_client(
            token=settings.slack_bot_token.get_secret_value(),
            base_url=self._base_url,
            timeout=WEB_TIMEOUT_SECONDS,
        )
        self.transport = SlackTransport(self._client)
        self._session: aiohttp.ClientSession | None = None
        #: the shared ingest of Slack events (both ingress paths store through it)
        self.ingest = SlackIngest(self._client, self.transport)
        secret = settings.slack_signing_secret
        app = build_app(
            self.ingest,
            base_url=self._base_url,
            secret=secret.get_secret_value() if secret else None,
        )
        #: ``POST /slack/events`` and ``/slack/interactions``, when a signing secret is set
        self.events_api = (
            EventsApiIngress(self.ingest, app, SignatureVerifier(secret.get_secret_value()))
            if secret
            else None
        )
        app_token = settings.slack_app_token
        self._app_token = app_token.get_secret_value() if app_token else None
        #: the Socket Mode connection, when an app-level token is set
        self.socket_mode = (
            SocketModeIngress(self.ingest, app, app_token=self._app_token, web_client=self._client)
            if self._app_token is not None
            else None
        )

    @property
    def identity(self) -> BotIdentity | None:
        return self.ingest.me

    def http_routes(self) -> Sequence[Any]:
        if self.events_api is None:
            return []  # Socket Mode only: no public endpoint to protect
        return self.events_api.http_routes()

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self, intake: Intake) -> None:
        # One pooled HTTP session for the Web API; the sdk falls back to a per-call session
        # when it is absent or closed (sends before start / after stop still work).
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=WEB_TIMEOUT_SECONDS)
        )
        self._client.session = self._session
        try:
            me = await self._resolve_identity()
        except BaseException:
            # the gateway does not stop an adapter whose start failed: close what we opened
            await self._session.close()
            self._client.session = self._session = None
            raise
        self.ingest.bind(intake, me)
        log.info(
            "slack_started",
            team_id=me.team_id,
            bot_user_id=me.user_id,
            http=self.events_api is not None,
            socket_mode=self.socket_mode is not None,
        )
        if self.socket_mode is not None:
            self.socket_mode.start(intake, me.team_id)

    async def stop(self) -> None:
        self.ingest.unbind()  # handlers answer 503 / do not ack from now on; Slack retries
        if self.socket_mode is not None:
            await self.socket_mode.stop()
        if self._session is not None:
            await self._session.close()
            self._client.session = None
            self._session = None
        log.info("slack_stopped")

    async def _resolve_identity(self) -> BotIdentity:
        try:
            response = await self._client.auth_test()
        except SlackApiError as exc:
            error = exc.response.get("error") if exc.response is not None else None
            raise ConfigError("SLACK_BOT_TOKEN", f"auth.test failed: {error}") from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise GatewayError(
                f"Slack Web API unreachable at {self._base_url} ({exc.__class__.__name__})"
            ) from exc
        user_id = response.get("user_id")
        if not isinstance(user_id, str) or not user_id:
            raise ConfigError("SLACK_BOT_TOKEN", "auth.test returned no user_id")
        bot_id = response.get("bot_id")
        team_id = response.get("team_id")
        return BotIdentity(
            user_id=user_id,
            bot_id=bot_id if isinstance(bot_id, str) and bot_id else None,
            team_id=team_id if isinstance(team_id, str) and team_id else None,
        )

    async def check(self) -> Sequence[Check]:
        """auth.test, granted scopes, ingress settings (``gateway doctor`` / ``setup``)."""
        return await check_tokens(
            self._client,
            base_url=self._base_url,
            app_token=self._app_token,
            events_api=self.events_api is not None,
        )
