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

This module is the lifecycle (identity, start, stop, checks); the HTTP ingress and the bolt
listeners are ``bolt_app.py``, Socket Mode ``socket_mode.py``, the ingest both share
``ingest.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier

from adapters.slack.bolt_app import BoltIngress
from adapters.slack.check import check_tokens
from adapters.slack.extract import PLATFORM, BotIdentity
from adapters.slack.settings import SlackSettings
from adapters.slack.socket_mode import (
    DRAIN_SECONDS,
    SOCKET_DOWN_SECONDS,
    GatewaySocketModeHandler,
    SocketModeIngress,
)
from adapters.slack.transport import SlackTransport, make_web_client
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.hub import KeyedLock
from gateway.core.ports import Check, Intake

log = structlog.get_logger(__name__)

#: the Web API timeout (seconds); a send that times out is reported as ambiguous
WEB_TIMEOUT_SECONDS = 10


class SlackAdapter(BoltIngress, SocketModeIngress):
    """``PlatformAdapter`` for Slack: one bot token (one workspace), HTTP and/or Socket Mode."""

    platform = PLATFORM

    def __init__(
        self,
        settings: SlackSettings,
    ) -> None:
        if settings.slack_bot_token is None:
            raise ConfigError("SLACK_BOT_TOKEN", "required to enable Slack")
        self._backfill_locks = KeyedLock()
        self._base_url = settings.slack_api_base_url
        self._client = make_web_client(
            token=settings.slack_bot_token.get_secret_value(),
            base_url=self._base_url,
            timeout=WEB_TIMEOUT_SECONDS,
        )
        self.transport = SlackTransport(self._client)
        secret = settings.slack_signing_secret
        self._verifier = SignatureVerifier(secret.get_secret_value()) if secret else None
        app_token = settings.slack_app_token
        self._app_token = app_token.get_secret_value() if app_token else None
        self._intake: Intake | None = None
        self._me: BotIdentity | None = None
        self._session: aiohttp.ClientSession | None = None
        self._app = self._build_app(secret.get_secret_value() if secret else None)
        self._socket: GatewaySocketModeHandler | None = None
        self._socket_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        #: seconds without a Socket Mode connection before the client is replaced
        self.socket_down_after = SOCKET_DOWN_SECONDS
        self._tasks: set[asyncio.Task[Any]] = set()
        self._inflight: set[asyncio.Task[Any]] = set()

    @property
    def identity(self) -> BotIdentity | None:
        return self._me

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self, intake: Intake) -> None:
        # One pooled HTTP session for the Web API; the sdk falls back to a per-call session
        # when it is absent or closed (sends before start / after stop still work).
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=WEB_TIMEOUT_SECONDS)
        )
        self._client.session = self._session
        try:
            self._me = await self._resolve_identity()
        except BaseException:
            # the gateway does not stop an adapter whose start failed: close what we opened
            await self._session.close()
            self._client.session = self._session = None
            raise
        self._intake = intake
        log.info(
            "slack_started",
            team_id=self._me.team_id,
            bot_user_id=self._me.user_id,
            http=self._verifier is not None,
            socket_mode=self._app_token is not None,
        )
        if self._app_token is not None:
            self._stopping.clear()
            # every replica holds its own connection (Slack spreads an app's events over up
            # to 10; the inbox dedupes), supervised like every receive loop
            self._socket_task = asyncio.create_task(
                intake.supervise(
                    f"slack-socket:{self._me.team_id or 'default'}",
                    self._run_socket,
                    stopping=self._stopping,
                ),
                name="slack-socket-mode",
            )

    async def stop(self) -> None:
        self._intake = None  # handlers answer 503 / do not ack from now on; Slack retries
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=DRAIN_SECONDS)
        self._stopping.set()
        task, self._socket_task = self._socket_task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=DRAIN_SECONDS)
            if not done:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for spawned in list(self._tasks):
            spawned.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
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
            events_api=self._verifier is not None,
        )
