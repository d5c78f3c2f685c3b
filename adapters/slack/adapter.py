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
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
import structlog
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.adapter.starlette.async_handler import to_starlette_response
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltRequest
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.logger.messages import warning_client_prioritized_and_token_skipped
from slack_bolt.response import BoltResponse
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapters.slack.check import check_tokens
from adapters.slack.extract import (
    PLATFORM,
    BotIdentity,
    answer_rules,
    approval_action_of,
    backfill_root,
    extract_event,
    extract_history,
    is_dm_channel,
    reaction_of,
    ts_key,
)
from adapters.slack.settings import SlackSettings
from adapters.slack.transport import (
    APPROVE_ACTION,
    DENY_ACTION,
    SlackTransport,
    make_web_client,
)
from gateway.core.domain import Envelope, Extracted, Ignored, Rejected, ReplyTarget
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.hub import KeyedLock
from gateway.core.ports import ApprovalClick, Check, IngestOutcome, Intake
from gateway.core.settings import Settings
from gateway.inbound.ingress import BODY_KEPT, ingest, json_body
from gateway.inbound.policy import PlaceAnswerRule
from gateway.runtime.supervisor import pause

log = structlog.get_logger(__name__)

#: Slack retries an event that is not answered within 3 s (platforms.md §2.3); the history
#: fetch must leave time for the stores that follow it.
BACKFILL_BUDGET_SECONDS = 1.5
#: at most this many earlier thread messages become context (the newest ones, plus the root)
BACKFILL_MAX_MESSAGES = 200
_BACKFILL_PAGE = 200
_BACKFILL_MAX_PAGES = 10
#: how long stop() waits for in-flight Socket Mode handlers to store and ack
_DRAIN_SECONDS = 5.0
#: the Web API timeout (seconds); a send that times out is reported as ambiguous
WEB_TIMEOUT_SECONDS = 10
#: how often the Socket Mode loop looks at its connection
SOCKET_CHECK_SECONDS = 1.0
#: a Socket Mode client not connected for this long is replaced (a supervisor restart)
SOCKET_DOWN_SECONDS = 60.0
#: keys our requests carry in bolt's context
ROUTE_KEY = "gateway_route"
ENVELOPE_KEY = "gateway_envelope_type"
ENVELOPE_ID_KEY = "gateway_envelope_id"
#: what bolt's request parser raises on a body of an odd shape (not JSON, a list, a field of
#: another type): ``json.loads``, then ``.get``/``in`` on whatever the fields hold
#: (and, from ``async_dispatch``, ``"type" in body["event"]`` on an ``event`` that is a
#: number); a body nested past Python's recursion limit raises RecursionError
_UNREADABLE = (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)


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


class GatewaySocketModeHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler with our ``handle``: bolt's own builds the
    ``AsyncBoltRequest`` unguarded (a payload of an odd shape raises and the envelope is
    neither stored nor acked) and is not tracked for a graceful stop."""

    def __init__(
        self, adapter: SlackAdapter, app: AsyncApp, app_token: str, web_client: AsyncWebClient
    ) -> None:
        super().__init__(app, app_token, web_client=web_client, logger=app.logger)
        self._adapter = adapter
        self.client.on_message_listeners.append(adapter.on_socket_frame)

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        await self._adapter.on_socket_request(client, req)


class SlackAdapter:
    """``PlatformAdapter`` for Slack: one bot token (one workspace), HTTP and/or Socket Mode."""

    platform = PLATFORM

    def __init__(
        self,
        settings: SlackSettings,
        *,
        answer_bots: bool | None = None,
        core: Settings | None = None,
        place_answers_all: PlaceAnswerRule | None = None,
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
        self._rules = answer_rules(
            settings, core, answer_bots=answer_bots, place_answers_all=place_answers_all
        )
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
            await asyncio.wait(set(self._inflight), timeout=_DRAIN_SECONDS)
        self._stopping.set()
        task, self._socket_task = self._socket_task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=_DRAIN_SECONDS)
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

    def _spawn(self, coro: Any, *, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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

    # --- HTTP: Events API and interactivity, through bolt -------------------------------------

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
        except _UNREADABLE:
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

    # --- bolt listeners (HTTP and Socket Mode alike) -------------------------------------------

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

    # --- Socket Mode (bolt's AsyncSocketModeHandler), supervised ----------------------------

    async def _run_socket(self) -> None:
        """The Socket Mode receive loop, run through ``Intake.supervise`` (on every replica:
        ``gateway_worker_up{worker="ingress:slack-socket:…"}``). slack_sdk's client
        reconnects by itself; when it has not been connected for ``socket_down_after``
        seconds, this raises so the supervisor counts a restart and builds a fresh client."""
        assert self._app_token is not None
        handler = GatewaySocketModeHandler(self, self._app, self._app_token, self._client)
        self._socket = handler
        connect = asyncio.create_task(
            handler.connect_async(),  # type: ignore[no-untyped-call]  # bolt lacks annotations
            name="slack-socket-connect",
        )
        down_since: float | None = None
        try:
            while not self._stopping.is_set():
                await pause(min(SOCKET_CHECK_SECONDS, self.socket_down_after / 4), self._stopping)
                if connect.done() and connect.exception() is not None:
                    raise GatewayError("Slack Socket Mode connect failed") from connect.exception()
                if await handler.client.is_connected():
                    down_since = None
                    continue
                now = time.monotonic()
                down_since = now if down_since is None else down_since
                if now - down_since >= self.socket_down_after:
                    raise GatewayError(
                        f"Slack Socket Mode not connected for {now - down_since:.0f} s"
                    )
        finally:
            connect.cancel()
            await asyncio.gather(connect, return_exceptions=True)
            if self._inflight:
                await asyncio.wait(set(self._inflight), timeout=_DRAIN_SECONDS)
            await handler.close_async()  # type: ignore[no-untyped-call]  # bolt lacks annotations
            self._socket = None

    async def on_socket_frame(self, message: aiohttp.WSMessage) -> None:
        """Every Socket Mode frame, before slack_sdk parses it: one that is not JSON is
        dropped by the sdk with a log line; keep it as a dead letter (invariant 7). It has
        no readable ``envelope_id``, so it cannot be acked (Slack redelivers, and gives up)."""
        if message.type != aiohttp.WSMsgType.TEXT or not isinstance(message.data, str):
            return
        data = message.data
        if not data.startswith("{"):
            return  # the sdk ignores these too (and Slack sends none)
        try:
            json.loads(data)
        except ValueError:
            pass
        else:
            return
        intake = self._intake
        if intake is not None:
            self._spawn(
                intake.submit(
                    Rejected(platform=PLATFORM, reason="socket mode frame is not JSON"),
                    raw={"body": data[:BODY_KEPT]},
                ),
                name="slack-socket-dead-letter",
            )

    async def on_socket_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        """One envelope: dispatched into bolt, acked by bolt only when the listener's
        answer is 200 (``send_async_response``: status 200 -> ack, else none)."""
        # The sdk runs each listener in its own untracked future; register it so stop() can
        # let it finish its store and ack.
        current = asyncio.current_task()
        if current is not None:
            self._inflight.add(current)
        started = time.time()
        try:
            intake = self._intake
            if intake is None or self._me is None:
                return  # not acked: Slack redelivers to a live connection
            try:
                bolt_request = AsyncBoltRequest(
                    mode="socket_mode",
                    body=request.payload,
                    headers=build_headers(request),
                    context={ENVELOPE_KEY: request.type, ENVELOPE_ID_KEY: request.envelope_id},
                )
                response = await self._app.async_dispatch(bolt_request)
            except _UNREADABLE:
                payload = request.payload
                await intake.submit(
                    Rejected(platform=PLATFORM, reason=f"socket mode {request.type}: unreadable"),
                    raw=payload if isinstance(payload, Mapping) else {"body": payload},
                )
                await client.send_socket_mode_response(
                    SocketModeResponse(envelope_id=request.envelope_id)
                )
                return
            await send_async_response(client, request, response, started)
        except Exception:  # broad on purpose: not acked on purpose: Slack redelivers the envelope
            log.exception("slack_socket_ingest_failed", envelope_id=request.envelope_id)
        finally:
            if current is not None:
                self._inflight.discard(current)

    # --- shared ingest -----------------------------------------------------------------------

    async def _ingest(
        self, payload: object, intake: Intake, me: BotIdentity
    ) -> tuple[Extracted, IngestOutcome]:
        raw: Mapping[str, Any] = payload if isinstance(payload, Mapping) else {"body": payload}
        event_id = raw.get("event_id")

        async def submit(extracted: Extracted) -> IngestOutcome:
            root = backfill_root(extracted) if isinstance(extracted, Envelope) else None
            if isinstance(extracted, Envelope) and root is not None:
                # app_mention and message for one post arrive together: the first stores the
                # thread's history and then the mention; the second must wait for both, or
                # it would see the session half-built and store the mention before the history
                async with self._backfill_locks.hold(str(extracted.key)):
                    if not await intake.knows(extracted.key):
                        await self._backfill(extracted, root, intake, me)
                    return await intake.submit(extracted, raw=raw)
            return await intake.submit(extracted, raw=raw)

        # +1/-1 on the bot's reply is that reply's feedback (the reaction event itself is
        # still recorded as ignored: it is not a message)
        return await ingest(
            intake,
            platform=PLATFORM,
            raw=raw,
            extract=lambda: extract_event(payload, me=me, rules=self._rules),
            reaction=lambda: reaction_of(payload),
            event_id=event_id if isinstance(event_id, str) else None,
            submit=submit,
        )

    async def _backfill(
        self, mention: Envelope, root: str, intake: Intake, me: BotIdentity
    ) -> None:
        channel = mention.key.chat_id
        try:
            history = await asyncio.wait_for(
                self._thread_history(channel, root, before=mention.message_id),
                timeout=BACKFILL_BUDGET_SECONDS,
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            # The mention is still stored and answered, with less context.
            log.warning(
                "slack_backfill_failed",
                channel=channel,
                thread_ts=root,
                error=exc.__class__.__name__,
            )
            return
        is_dm = is_dm_channel(channel, mention.metadata.get("channel_type"))
        stored = 0
        for item in history:
            extracted = extract_history(
                item, team_id=mention.key.scope, channel=channel, is_dm=is_dm, me=me
            )
            if isinstance(extracted, Envelope) and extracted.key == mention.key:
                await intake.submit(extracted, raw=item)
                stored += 1
        log.info("slack_backfilled", channel=channel, thread_ts=root, messages=stored)

    async def _thread_history(
        self, channel: str, root: str, *, before: str
    ) -> list[Mapping[str, Any]]:
        """The thread's messages older than ``before``, oldest first: the root plus the newest
        ``BACKFILL_MAX_MESSAGES - 1`` replies."""
        limit = ts_key(before)
        messages: list[Mapping[str, Any]] = []
        cursor: str | None = None
        for _ in range(_BACKFILL_MAX_PAGES):
            response = await self._client.conversations_replies(
                channel=channel, ts=root, limit=_BACKFILL_PAGE, cursor=cursor
            )
            page = response.get("messages")
            for item in page if isinstance(page, list) else []:
                if isinstance(item, Mapping) and ts_key(str(item.get("ts", ""))) < limit:
                    messages.append(item)
            metadata = response.get("response_metadata")
            next_cursor = metadata.get("next_cursor") if isinstance(metadata, Mapping) else None
            if not next_cursor or not response.get("has_more", True):
                break
            cursor = str(next_cursor)
        messages.sort(key=lambda m: ts_key(str(m.get("ts", ""))))
        if len(messages) > BACKFILL_MAX_MESSAGES:
            messages = messages[:1] + messages[-(BACKFILL_MAX_MESSAGES - 1) :]
        return messages
