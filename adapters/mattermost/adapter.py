"""The Mattermost surface: websocket events and REST reconciliation into the core's intake.

Mattermost has no ack and no replay (platforms.md §3.5 #10), so "nothing missed" is ours:

* Every post event is handled in arrival order, one at a time, and after ``intake.submit``
  returned (durable ingest) the channel's cursor - the last seen ``create_at`` - advances and
  is saved with ``intake.save_cursor``.
* After every (re)connect, and so after a restart, *before* reading further events, the
  channels we are in are listed and each one's posts since its cursor are fetched
  (``GET /channels/{id}/posts?since=``; when that answers its cap of 1000, the channel's
  pages too, back to the cursor) and submitted through the same intake. A post seen both
  ways has the same ``message_id``/``event_id``; the core's inbox keeps one.
* If handling a post fails, it is recorded as a Rejected dead letter and its channel's cursor
  is held just before it, so the post is fetched again: on the next reconnect, or by a resync
  tried from the read loop's idle tick.

What is submitted: ``posted``, ``post_edited``, ``post_deleted`` (own and system posts as
``Ignored``, so the inbox shows them) and frames that are not JSON (``Rejected``). Thumbs
up/down reactions go to ``intake.record_feedback``. Presence and protocol events (``hello``,
``typing``, ``status_change``, ``channel_viewed``...) are dropped here: they would fill the
inbox and carry nothing for a conversation.

This module is the lifecycle, the approval buttons' route and the websocket events; the
adapter holds a ``Reconciler`` (``reconcile.py``) for the identity, the cursors and the
reconciliation, ``config.py`` the configuration.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from adapters.mattermost.actions import ACTIONS_PATH, Refused, actions_key, press_of
from adapters.mattermost.api import MattermostApi, MattermostApiError
from adapters.mattermost.check import check_server
from adapters.mattermost.config import MattermostConfig
from adapters.mattermost.extract import (
    PLATFORM,
    POST_EVENTS,
    REACTION_EVENTS,
    BotIdentity,
    approval_reaction_of,
    extract_event,
    post_of,
    reaction_of,
)
from adapters.mattermost.reconcile import Reconciler
from adapters.mattermost.transport import MattermostTransport
from adapters.mattermost.urls import ServerUrls, server_urls
from adapters.mattermost.websocket import EventStream
from gateway.core.domain import Rejected
from gateway.core.errors import ConfigError, GatewayError, StoreError
from gateway.core.ports import ApprovalClick, Check, Intake
from gateway.inbound.ingress import ingest, record_reaction

__all__ = ["MattermostAdapter", "MattermostConfig"]

log = structlog.get_logger(__name__)


class MattermostAdapter:
    """``PlatformAdapter`` for one Mattermost server: the websocket, the approval buttons'
    route and the lifecycle here; the identity, cursors and reconciliation in the
    ``Reconciler`` it holds."""

    platform = PLATFORM

    def __init__(self, config: MattermostConfig) -> None:
        try:
            self._urls: ServerUrls = server_urls(config.url)
        except ValueError as exc:
            raise ConfigError("MATTERMOST_URL", str(exc)) from exc
        self._config = config
        self._api = MattermostApi(
            api_base=self._urls.api_base,
            token=config.token,
            ssl_context=config.ssl_context,
            timeout=config.http_timeout,
            trust_env=config.trust_env,
        )
        self._actions_key = actions_key(config.token)
        self.transport = MattermostTransport(
            self._api,
            scope=self._urls.scope,
            actions_url=config.actions_url,
            actions_key=self._actions_key,
        )
        #: the identity, channel cursors, held posts and reconciliation
        self.reconciler = Reconciler(config=config, api=self._api, scope=self._urls.scope)
        self._stream: EventStream | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    # --- PlatformAdapter --------------------------------------------------------------------

    @property
    def scope(self) -> str:
        return self._urls.scope

    @property
    def stream(self) -> EventStream | None:
        return self._stream

    @property
    def identity(self) -> BotIdentity | None:
        ctx = self.reconciler.ctx
        return ctx.bot if ctx else None

    def http_routes(self) -> Sequence[Any]:
        # the websocket is outbound; the one route is where approval buttons post back
        if self._config.actions_url is None:
            return ()
        return [Route(ACTIONS_PATH, self._handle_action, methods=["POST"])]

    async def _handle_action(self, request: Request) -> Response:
        """``POST /mattermost/actions``: the Mattermost server relays a button press. The
        context must carry our signature (``actions.press_of``); the presser is the server's
        ``user_id``; the core checks the place, the card and the person. The answer's
        ``ephemeral_text`` is shown only to the presser."""
        try:
            intake, _ = self.reconciler.require()
        except GatewayError:
            return JSONResponse({"ephemeral_text": "Not ready, try again."}, status_code=503)
        try:
            payload = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError):
            payload = None
        press = press_of(payload, key=self._actions_key)
        if isinstance(press, Refused):
            log.warning("mattermost_action_refused", reason=press.reason)
            return JSONResponse(
                {"ephemeral_text": "This button is not valid here."}, status_code=403
            )
        outcome = await intake.approval_click(
            ApprovalClick(
                platform=PLATFORM,
                approval_id=press.approval_id,
                user_id=press.user_id,
                approve=press.approve,
                chat_id=press.channel_id,
                message_id=press.post_id,
            )
        )
        log.info("mattermost_approval_press", outcome=outcome.outcome)
        return JSONResponse({"ephemeral_text": outcome.message})

    async def check(self) -> Sequence[Check]:
        """users/me, and the teams and channels the bot is in (``gateway doctor`` / ``setup``);
        its own short-lived client, so the adapter's is untouched."""
        api = MattermostApi(
            api_base=self._urls.api_base,
            token=self._config.token,
            ssl_context=self._config.ssl_context,
            timeout=self._config.http_timeout,
            trust_env=self._config.trust_env,
        )
        return await check_server(api, url=self._config.url)

    async def start(self, intake: Intake) -> None:
        self.reconciler.bind(intake)
        self._stopping.clear()
        try:
            await self.reconciler.resolve_identity()
        except MattermostApiError as exc:
            if exc.status in (401, 403):
                raise ConfigError(
                    "MATTERMOST_TOKEN", f"the server refused the token ({exc.error_id})"
                ) from exc
            # the server is up but unwell: resolve again before the first connection
            log.warning("mattermost_identity_deferred", error=str(exc))
        except httpx.HTTPError as exc:
            # unreachable for now: do not take the whole gateway down, retry with backoff
            log.warning("mattermost_identity_deferred", error=repr(exc))
        stream = EventStream(
            url=self._urls.websocket_url,
            token=self._config.token,
            on_event=self._on_event,
            on_error=self.reconciler.record_failure,
            on_connected=self.reconciler.on_connected,
            on_connecting=self.reconciler.on_connecting,
            on_tick=self.reconciler.on_tick,
            tick_interval=self._config.tick_interval,
            ssl_context=self._config.ssl_context,
            backoff=self._config.backoff,
            hello_timeout=self._config.hello_timeout,
            use_env_proxy=self._config.trust_env,
        )
        self._stream = stream
        self.transport.attach_typing(stream.send_action)
        # one websocket per bot across replicas: the stream (and its reconciliation) runs on
        # the replica holding this server's leader lock; sending works on every replica
        self._task = asyncio.create_task(
            intake.lead(
                f"mattermost-stream:{self._urls.scope}",
                stream.run,
                stopping=self._stopping,
            ),
            name="mattermost-event-stream",
        )

    async def stop(self) -> None:
        self._stopping.set()
        task, self._task = self._task, None
        stream = self._stream
        self.transport.attach_typing(None)
        if task is not None and stream is not None:
            # graceful: the event in hand is finished (its submit returns), the socket is
            # closed with 1000; cancel only if that takes too long (a hung connect)
            await stream.stop()
            done, _ = await asyncio.wait({task}, timeout=self._config.stop_timeout)
            if not done:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await self.reconciler.save_cursors()  # what live posts moved since the last tick
        except (StoreError, GatewayError) as exc:  # a lagging cursor: posts fetched again
            log.warning("mattermost_cursor_save_failed", error=str(exc))
        self._stream = None
        await self.transport.close(timeout=self._config.http_timeout)

    # --- websocket events -------------------------------------------------------------------

    async def _on_event(self, frame: dict[str, Any]) -> None:
        if "raw_frame" in frame:
            intake, _ = self.reconciler.require()
            await intake.submit(
                Rejected(platform=PLATFORM, reason="websocket frame is not a JSON object"),
                raw=frame,
            )
            return
        name = frame.get("event")
        if not isinstance(name, str):  # fuzzing found a list name, which was unhashable
            intake, _ = self.reconciler.require()
            await intake.submit(
                Rejected(platform=PLATFORM, reason="websocket event name is not a string"),
                raw=frame,
            )
            return
        if name in REACTION_EVENTS:
            await self._on_reaction(frame)
            return
        if name not in POST_EVENTS:
            return  # presence/protocol noise, see the module doc
        intake, ctx = self.reconciler.require()
        post = post_of(frame)
        hint: str | None = None
        if post is not None:
            data = frame.get("data")
            raw_type = data.get("channel_type") if isinstance(data, Mapping) else None
            if isinstance(raw_type, str) and raw_type:
                self.reconciler.remember_type(post["channel_id"], raw_type)
            else:
                hint = await self.reconciler.channel_type(post["channel_id"])
        await ingest(
            intake,
            platform=PLATFORM,
            raw=frame,
            extract=lambda: extract_event(frame, ctx=ctx, channel_type_hint=hint),
        )
        if name == "posted" and post is not None:
            await self.reconciler.seen(post)

    async def _on_reaction(self, frame: dict[str, Any]) -> None:
        """A thumbs up/down on one of the bot's replies is that reply's feedback; the core
        answers False for reactions on other posts. Not submitted: it is not a message."""
        intake, ctx = self.reconciler.require()
        approval = approval_reaction_of(frame, ctx=ctx)
        if approval is not None:
            # ✅/❌ on an approval card; the core finds the card by its post id
            # and answers "unknown" for any other post. Mattermost has no per-user notice
            # for a refused reaction without interactive buttons: it is logged only.
            click = ApprovalClick(
                platform=PLATFORM,
                approval_id="",
                user_id=approval.user_id,
                approve=approval.approve,
                chat_id=approval.chat_id,
                message_id=approval.post_id,
            )
            outcome = await intake.approval_click(click)
            log.info("mattermost_approval_reaction", outcome=outcome.outcome)
            return
        await record_reaction(
            intake, platform=PLATFORM, reaction=lambda: reaction_of(frame, ctx=ctx)
        )
