"""Slack Socket Mode (when ``SLACK_APP_TOKEN`` is set): bolt's ``AsyncSocketModeHandler`` on
slack_sdk's aiohttp client, run through ``Intake.supervise`` (every replica, restarted with
backoff, replaced when it stays disconnected); an envelope bolt cannot read is a dead letter
and acked, a frame that is not JSON is a dead letter (it cannot be acked). An object built
around the shared ingest (``SlackIngest``) and the bolt app, which it takes, as bolt's own
Socket Mode handler takes the app."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import send_async_response
from slack_bolt.adapter.socket_mode.internals import build_headers
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.bolt_app import ENVELOPE_ID_KEY, ENVELOPE_KEY, UNREADABLE
from adapters.slack.extract import PLATFORM
from adapters.slack.ingest import SlackIngest
from gateway.core.domain import Rejected
from gateway.core.errors import GatewayError
from gateway.core.lifecycle.supervisor import pause
from gateway.core.ports import Intake
from gateway.inbound.ingress import BODY_KEPT

log = structlog.get_logger(__name__)

#: how long stop() waits for in-flight Socket Mode handlers to store and ack
DRAIN_SECONDS = 5.0
#: how often the Socket Mode loop looks at its connection
SOCKET_CHECK_SECONDS = 1.0
#: a Socket Mode client not connected for this long is replaced (a supervisor restart)
SOCKET_DOWN_SECONDS = 60.0


class GatewaySocketModeHandler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler with our ``handle``: bolt's own builds the
    ``AsyncBoltRequest`` unguarded (a payload of an odd shape raises and the envelope is
    neither stored nor acked) and is not tracked for a graceful stop."""

    def __init__(
        self, ingress: SocketModeIngress, app: AsyncApp, app_token: str, web_client: AsyncWebClient
    ) -> None:
        super().__init__(app, app_token, web_client=web_client, logger=app.logger)
        self._ingress = ingress
        self.client.on_message_listeners.append(ingress.on_socket_frame)

    async def handle(self, client: AsyncBaseSocketModeClient, req: SocketModeRequest) -> None:
        await self._ingress.on_socket_request(client, req)


class SocketModeIngress:
    """``SlackAdapter``'s Socket Mode receive loop and its envelope handling (when
    ``SLACK_APP_TOKEN`` is set)."""

    def __init__(
        self, ingest: SlackIngest, app: AsyncApp, *, app_token: str, web_client: AsyncWebClient
    ) -> None:
        self._ingest = ingest
        self._app = app
        self._app_token = app_token
        self._web_client = web_client
        self._socket: GatewaySocketModeHandler | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        #: seconds without a Socket Mode connection before the client is replaced
        self.socket_down_after = SOCKET_DOWN_SECONDS
        #: dead letters stored off the sdk's frame callback
        self._tasks: set[asyncio.Task[Any]] = set()
        #: envelope handlers still storing (the sdk runs each in an untracked future)
        self._inflight: set[asyncio.Task[Any]] = set()

    def start(self, intake: Intake, team_id: str | None) -> None:
        """Every replica holds its own connection (Slack spreads an app's events over up to
        10; the inbox dedupes), supervised like every receive loop."""
        self._stopping.clear()
        self._task = asyncio.create_task(
            intake.supervise(
                f"slack-socket:{team_id or 'default'}", self._run_socket, stopping=self._stopping
            ),
            name="slack-socket-mode",
        )

    async def stop(self) -> None:
        """Let envelopes in hand store and ack, close the connection, drop the rest (after
        the ingest was unbound: nothing new is acked)."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=DRAIN_SECONDS)
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=DRAIN_SECONDS)
            if not done:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for spawned in list(self._tasks):
            spawned.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Any, *, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_socket(self) -> None:
        """The Socket Mode receive loop, run through ``Intake.supervise`` (on every replica:
        ``gateway_worker_up{worker="ingress:slack-socket:…"}``). slack_sdk's client
        reconnects by itself; when it has not been connected for ``socket_down_after``
        seconds, this raises so the supervisor counts a restart and builds a fresh client."""
        handler = GatewaySocketModeHandler(self, self._app, self._app_token, self._web_client)
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
                await asyncio.wait(set(self._inflight), timeout=DRAIN_SECONDS)
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
        intake = self._ingest.intake
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
            ready = self._ingest.ready()
            if ready is None:
                return  # not acked: Slack redelivers to a live connection
            try:
                bolt_request = AsyncBoltRequest(
                    mode="socket_mode",
                    body=request.payload,
                    headers=build_headers(request),
                    context={ENVELOPE_KEY: request.type, ENVELOPE_ID_KEY: request.envelope_id},
                )
                response = await self._app.async_dispatch(bolt_request)
            except UNREADABLE:
                payload = request.payload
                await ready[0].submit(
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
