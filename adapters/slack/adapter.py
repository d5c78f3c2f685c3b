"""Slack ingress (Events API over HTTP, Socket Mode) and the adapter lifecycle.

Ingress rules (architecture invariants 2, 3, 7; platforms.md §2.2-§2.7):

* HTTP: ``POST /slack/events``. The signature is checked over the raw bytes before anything
  else (bad or older than 5 minutes -> 401, nothing stored). ``url_verification`` is answered
  with ``{"challenge": …}``. Every other verified body is extracted and submitted; Slack gets its
  200 only after ``intake.submit`` returned (durably stored). Unknown event types get a 200 too
  (a 404 would make Slack retry, §2.4). Malformed JSON -> 400 and a ``Rejected`` dead letter.
* Socket Mode (when ``SLACK_APP_TOKEN`` is set): slack_sdk's aiohttp ``SocketModeClient``; each
  envelope is acked only after ``intake.submit`` returned, so an unacked envelope is redelivered.
* Retries (``X-Slack-Retry-Num``, Socket Mode ``retry_attempt``) and the app_mention + message
  pair are submitted like any event: the core's inbox dedupes on ``event_id`` and on
  ``(channel, ts)`` — extraction sets both.
* First contact inside an existing thread: the thread's earlier messages are fetched with
  ``conversations.replies`` and submitted first as backfill rows (context, never answered).
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapters.slack.check import check_tokens
from adapters.slack.extract import (
    PLATFORM,
    BotIdentity,
    Policy,
    approval_action_of,
    backfill_root,
    extract_event,
    extract_history,
    is_dm_channel,
    reaction_of,
    ts_key,
)
from adapters.slack.transport import (
    APPROVE_ACTION,
    DENY_ACTION,
    SlackTransport,
    make_web_client,
)
from gateway.domain import Envelope, Extracted, Ignored, Rejected, ReplyTarget
from gateway.errors import ConfigError, GatewayError
from gateway.hub import KeyedLock
from gateway.ingress import ingest, json_body
from gateway.ports import ApprovalClick, Check, IngestOutcome, Intake
from gateway.settings import Settings

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


class SlackAdapter:
    """``PlatformAdapter`` for Slack: one bot token (one workspace), HTTP and/or Socket Mode."""

    platform = PLATFORM

    def __init__(self, settings: Settings) -> None:
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
        self._policy = Policy(
            require_mention=settings.slack_require_mention,
            answer_bots=settings.gateway_answer_bots,
            allowed_channels=frozenset(settings.slack_allowed_channels),
            allowed_users=frozenset(settings.slack_allowed_users),
            answer_all_channels=frozenset(settings.slack_answer_all_channels),
        )
        self._intake: Intake | None = None
        self._me: BotIdentity | None = None
        self._session: aiohttp.ClientSession | None = None
        self._socket: SocketModeClient | None = None
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
            socket = SocketModeClient(
                app_token=self._app_token,
                web_client=self._client,
                auto_reconnect_enabled=True,
            )
            socket.socket_mode_request_listeners.append(self._on_socket_request)
            self._socket = socket
            # connect() retries until it succeeds; it must not block start().
            self._spawn(
                socket.connect(),  # type: ignore[no-untyped-call]  # sdk method lacks annotations
                name="slack-socket-connect",
            )

    async def stop(self) -> None:
        self._intake = None  # HTTP handlers answer 503 from now on; Slack will retry those
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=_DRAIN_SECONDS)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._socket is not None:
            await self._socket.close()  # type: ignore[no-untyped-call]  # sdk lacks annotations
            self._socket = None
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

    # --- HTTP: Events API ------------------------------------------------------------------

    def http_routes(self) -> Sequence[Any]:
        if self._verifier is None:
            return []  # Socket Mode only: no public endpoint to protect
        return [
            Route("/slack/events", self._handle_http, methods=["POST"]),
            # approval buttons (issue 14); Slack's "Interactivity Request URL"
            Route("/slack/interactions", self._handle_interaction, methods=["POST"]),
        ]

    def _signature_ok(self, body: bytes, request: Request) -> bool:
        assert self._verifier is not None
        timestamp = request.headers.get("x-slack-request-timestamp")
        signature = request.headers.get("x-slack-signature")
        try:
            # is_valid enforces the 5-minute replay window (abs(now - ts) > 300 -> False).
            return self._verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
        except (ValueError, UnicodeDecodeError, TypeError):
            # non-numeric timestamp, a body that is not UTF-8, or a non-ASCII signature
            # (compare_digest raises TypeError on it): not Slack's
            return False

    async def _handle_http(self, request: Request) -> Response:
        intake, me = self._intake, self._me
        if intake is None or me is None:
            return JSONResponse({"error": "not ready"}, status_code=503)
        body = await request.body()
        retry_num = request.headers.get("x-slack-retry-num")
        if not self._signature_ok(body, request):
            log.warning("slack_signature_rejected", retry_num=retry_num)
            return JSONResponse({"error": "invalid request"}, status_code=401)
        parsed = await json_body(intake, body, platform=PLATFORM, error={"error": "malformed JSON"})
        if isinstance(parsed, Response):
            return parsed
        payload = parsed.value
        if isinstance(payload, Mapping) and payload.get("type") == "url_verification":
            return JSONResponse({"challenge": payload.get("challenge")})
        try:
            extracted, outcome = await self._ingest(payload, intake, me)
        except Exception:  # broad on purpose: the store failed: answer 503 so Slack retries later
            log.exception("slack_ingest_failed", retry_num=retry_num)
            return JSONResponse({"error": "not stored"}, status_code=503)
        log.info(
            "slack_event_ingested",
            status=outcome.status,
            retry_num=retry_num,
            retry_reason=request.headers.get("x-slack-retry-reason"),
        )
        if isinstance(extracted, Rejected):
            # stored as a dead letter; the status tells the sender the body was unusable
            return JSONResponse({"error": extracted.reason}, status_code=400)
        return Response(status_code=200)

    async def _handle_interaction(self, request: Request) -> Response:
        """``POST /slack/interactions``: signature verified over the raw form body, then the
        approval press is decided by the core. Slack wants the 200 within 3 s; the decision
        is one row update."""
        intake = self._intake
        if intake is None:
            return JSONResponse({"error": "not ready"}, status_code=503)
        body = await request.body()
        if not self._signature_ok(body, request):
            log.warning("slack_interaction_signature_rejected")
            return JSONResponse({"error": "invalid request"}, status_code=401)
        try:
            form = urllib.parse.parse_qs(body.decode("utf-8"), strict_parsing=True)
            payload = json.loads(form["payload"][0])
        except (ValueError, KeyError, IndexError, UnicodeDecodeError, RecursionError):
            return JSONResponse({"error": "malformed interaction"}, status_code=400)
        if not isinstance(payload, Mapping):
            return JSONResponse({"error": "malformed interaction"}, status_code=400)
        await self._on_interaction(payload, intake)
        return Response(status_code=200)

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

    # --- Socket Mode -------------------------------------------------------------------------

    async def _on_socket_request(
        self, client: AsyncBaseSocketModeClient, request: SocketModeRequest
    ) -> None:
        # The sdk runs each listener in its own untracked future; register it so stop() can
        # let it finish its store and ack.
        current = asyncio.current_task()
        if current is not None:
            self._inflight.add(current)
        try:
            intake, me = self._intake, self._me
            if intake is None or me is None:
                return  # not acked: Slack redelivers to a live connection
            if request.type == "events_api":
                _, outcome = await self._ingest(request.payload, intake, me)
            elif request.type == "interactive" and await self._on_interaction(
                request.payload, intake
            ):
                outcome = IngestOutcome(status="ignored", reason="approval button")
            else:
                # interactive / slash_commands are not part of this gateway; ack so Slack stops
                # redelivering, and keep a record of what was dropped.
                outcome = await intake.submit(
                    Ignored(platform=PLATFORM, reason=f"socket mode {request.type}"),
                    raw=request.payload,
                )
            await client.send_socket_mode_response(
                SocketModeResponse(envelope_id=request.envelope_id)
            )
            log.info(
                "slack_event_ingested",
                status=outcome.status,
                envelope_id=request.envelope_id,
                retry_attempt=request.retry_attempt,
            )
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
            extract=lambda: extract_event(payload, me=me, policy=self._policy),
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
