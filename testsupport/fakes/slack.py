"""A fake Slack on 127.0.0.1:<ephemeral port>, speaking the wire protocol (platforms.md §4.4).

* Web API under ``/api/``: ``auth.test``, ``chat.postMessage``, ``conversations.replies``,
  ``apps.connections.open`` — JSON, form or query parameters, Bearer token, Slack's envelope
  (``{"ok": false, "error": …}`` with HTTP 200; 429 + ``Retry-After`` + ``ratelimited``).
* A state model: channels (public, private, DM), messages with ``ts``, threads by root ``ts``;
  the bot's posts are stored where ``thread_ts`` put them, and posts that name a thread root that
  does not exist or a reply's own ``ts`` are recorded in ``thread_violations``.
* Events API pusher: POSTs ``event_callback`` bodies to ``events_url``, signed ``v0`` over the
  exact bytes sent, re-sent with ``X-Slack-Retry-Num``/``X-Slack-Retry-Reason`` on a non-2xx or
  when the answer takes longer than ``http_ack_timeout`` (Slack's 3 s). A mention produces both
  ``app_mention`` and ``message`` (both subscribed), each with its own ``event_id``.
* Socket Mode: ``apps.connections.open`` hands out ``ws://127.0.0.1:<port>/link/?ticket=…``;
  the socket gets ``hello``, then envelopes with ``retry_attempt``; acks are tracked by
  ``envelope_id`` and an unacked envelope is redelivered; ``disconnect`` on demand.
* Slack's AI surface: ``chat.startStream`` / ``appendStream`` / ``stopStream`` (refused on
  demand with ``refuse_streaming``), ``assistant.threads.setSuggestedPrompts`` / ``setTitle``,
  ``assistant_thread_started`` (``user_opens_assistant_thread``), feedback buttons
  (``click_feedback``), and agent sessions: ``agents.sessions.setStatus`` (refused on demand
  with ``refuse_agent_sessions``) and the stop button a ``processing`` session shows, whose
  press stops the thread's streams and sends ``agent_session_stopped`` (``user_presses_stop``).
* Fault injection (``fail_next``) and a request recorder (``calls``).

The "user side" (``user_posts``, ``user_edits``…) creates messages in the state model and
emits the events Slack would; it returns once every delivery has been answered (HTTP) or acked
(Socket Mode) or given up on, so a test can assert right after it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl

import aiohttp
from aiohttp import web

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-1-fake-app-token"
SIGNING_SECRET = "fake-signing-secret"
TEAM_ID = "T0FAKE"
BOT_USER_ID = "U0BOT"
BOT_ID = "B0BOT"
APP_ID = "A0FAKE"
HUMAN = "U0HUMAN"

DEFAULT_SUBSCRIPTIONS = frozenset(
    {
        "app_mention",
        "message.channels",
        "message.groups",
        "message.im",
        "message.mpim",
        "assistant_thread_started",
        "agent_session_stopped",
    }
)
#: the bot scopes an app installed from deploy/slack/manifest.*.yaml is granted; auth.test
#: reports them in the ``x-oauth-scopes`` header, as Slack does for every Web API call
DEFAULT_SCOPES = (
    "app_mentions:read",
    "assistant:write",
    "channels:history",
    "chat:write",
    "files:read",
    "files:write",
    "groups:history",
    "im:history",
    "mpim:history",
    "reactions:read",
)
_SUBSCRIPTION_OF_KIND = {
    "channel": "message.channels",
    "group": "message.groups",
    "im": "message.im",
    "mpim": "message.mpim",
}


async def wait_until(
    predicate: Callable[[], bool], *, within: float = 5.0, what: str = "condition"
) -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.01)


# --- state model ------------------------------------------------------------------------------


@dataclass
class Message:
    channel: str
    ts: str
    text: str
    user: str | None = None
    bot_id: str | None = None
    thread_ts: str | None = None
    subtype: str | None = None
    metadata: Any = None
    files: list[dict[str, Any]] | None = None
    blocks: list[dict[str, Any]] | None = None
    edited: bool = False
    #: a message begun with chat.startStream and not stopped yet (appendStream grows it)
    streaming: bool = False

    @property
    def is_reply(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts


@dataclass
class Channel:
    id: str
    kind: Literal["channel", "group", "im", "mpim"] = "channel"
    members: set[str] = field(default_factory=set)
    messages: list[Message] = field(default_factory=list)

    def find(self, ts: str) -> Message | None:
        return next((m for m in self.messages if m.ts == ts), None)

    def thread(self, root_ts: str) -> list[Message]:
        """The root and its replies, oldest first (what conversations.replies returns)."""
        found = [m for m in self.messages if m.ts == root_ts or m.thread_ts == root_ts]
        return sorted(found, key=lambda m: float(m.ts))


@dataclass
class ApiCall:
    method: str
    http_method: str
    headers: dict[str, str]
    params: dict[str, Any]
    status: int = 0
    response: Any = None
    at: float = field(default_factory=time.monotonic)


@dataclass
class Attempt:
    retry_num: int  # X-Slack-Retry-Num / retry_attempt sent with it
    status: int | None  # None: timed out or connection failed (Socket Mode: not acked)
    reason: str = ""  # X-Slack-Retry-Reason / retry_reason sent with it ("" on the first)


@dataclass
class Delivery:
    """One event on its way to the app, over HTTP or Socket Mode, with every attempt."""

    event_id: str
    payload: dict[str, Any]
    transport: str
    attempts: list[Attempt] = field(default_factory=list)
    body: bytes = b""  # the exact bytes signed and sent (HTTP)
    envelope_id: str | None = None
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    #: time.monotonic() of the first ack (Socket Mode), to check "ack after durable ingest"
    acked_at: float | None = None
    ack_count: int = 0

    @property
    def succeeded(self) -> bool:
        if self.transport == "socket":
            return self.acked.is_set()
        return any(a.status is not None and 200 <= a.status < 300 for a in self.attempts)


@dataclass
class Posted:
    """What ``user_posts`` did: the new message and the deliveries it caused."""

    ts: str
    message: Message
    deliveries: list[Delivery]


@dataclass
class Fault:
    error: str | None = None
    status: int = 200
    retry_after: float | None = None
    delay: float = 0.0


@dataclass
class Upload:
    id: str
    filename: str
    length: int
    data: bytes | None = None
    #: where completeUploadExternal shared it
    channel: str | None = None
    thread_ts: str | None = None
    title: str | None = None
    initial_comment: str | None = None


@dataclass
class ThreadViolation:
    channel: str
    thread_ts: str
    problem: str


# --- the server -------------------------------------------------------------------------------


class FakeSlack:
    def __init__(
        self,
        *,
        team_id: str = TEAM_ID,
        bot_user_id: str = BOT_USER_ID,
        bot_id: str = BOT_ID,
        bot_token: str = BOT_TOKEN,
        app_token: str = APP_TOKEN,
        signing_secret: str = SIGNING_SECRET,
        subscriptions: Iterable[str] = DEFAULT_SUBSCRIPTIONS,
    ) -> None:
        self.team_id = team_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        #: chat.postEphemeral calls (the polite refusals only one person sees)
        self.ephemerals: list[dict[str, Any]] = []
        #: chat.update calls that changed a message: (channel, ts, thread_ts, new text)
        self.updates: list[tuple[str, str, str | None, str]] = []
        #: chat.delete calls that deleted a message: (channel, ts)
        self.deleted: list[tuple[str, str]] = []
        self.subscriptions = set(subscriptions)
        #: sent as ``x-oauth-scopes`` on Web API answers; None = no header
        self.granted_scopes: list[str] | None = list(DEFAULT_SCOPES)
        #: where Events API bodies go (the gateway's ``/slack/events``); None = not delivered
        self.events_url: str | None = None
        #: "http" (Events API), "socket" (Socket Mode) or "none" (events only recorded)
        self.mode: Literal["http", "socket", "none"] = "http"
        #: Slack waits 3 s for the 2xx (platforms.md §2.3); tests may shorten it
        self.http_ack_timeout = 3.0
        #: Slack retries ~immediately, after 1 min, after 5 min; tests use short delays
        self.http_retry_delays: tuple[float, ...] = (0.0, 0.05, 0.1)
        self.socket_ack_timeout = 3.0
        self.socket_max_retries = 3
        #: deliver the app_mention and the message of one post at the same time
        self.concurrent_mention_events = False
        #: also emit the hidden ``message_replied`` notification (WITHOUT subtype, as the
        #: Events API really sends it, platforms.md §2.5) when someone replies in a thread
        self.emit_message_replied = False
        #: the bot's own posts come back as ``message`` events (message.* subscriptions do)
        self.echo_bot_messages = True

        self.channels: dict[str, Channel] = {}
        #: uploaded files, served at ``url_private`` to the bot token only
        self.files: dict[str, tuple[str, bytes]] = {}
        self.file_downloads: list[str] = []
        self.calls: list[ApiCall] = []
        self.deliveries: list[Delivery] = []
        self.thread_violations: list[ThreadViolation] = []
        #: ``assistant.threads.setStatus`` calls: (channel, thread_ts, status); "" clears
        self.statuses: list[tuple[str, str, str]] = []
        #: files.uploadV2: file id -> the upload (bytes arrive at the upload URL)
        self.uploads: dict[str, Upload] = {}
        #: the error ``assistant.threads.setStatus`` answers with (None = it works)
        self.set_status_error: str | None = None
        #: the error chat.startStream / appendStream / stopStream answer with (None = they
        #: work): ``unknown_method`` for a workspace without them, ``not_allowed_token_type``...
        self.refuse_streaming: str | None = None
        #: the streaming calls that changed a message: (method, channel, ts, text added)
        self.stream_calls: list[tuple[str, str, str, str]] = []
        #: ``assistant.threads.setSuggestedPrompts``: (channel, thread_ts, prompts, title)
        self.suggested_prompts: list[tuple[str, str, list[dict[str, str]], str | None]] = []
        #: ``assistant.threads.setTitle``: (channel, thread_ts, title)
        self.titles: list[tuple[str, str, str]] = []
        #: each thread's agent session status (agents.sessions.setStatus, or chat.stopStream's
        #: ``session_status``): "processing" shows the stop button
        self.agent_sessions: dict[tuple[str, str], str] = {}
        #: every status set: (channel, thread_ts, status)
        self.session_statuses: list[tuple[str, str, str]] = []
        #: the error agents.sessions.setStatus answers with (None = it works): an app not
        #: declared as an agent, a missing scope...
        self.refuse_agent_sessions: str | None = None
        self.socket_connections = 0
        self._faults: dict[str, list[Fault]] = {}
        #: seconds the next calls to a method wait before answering, after taking effect
        self._late: dict[str, list[float]] = {}
        self._ts_counter = itertools.count(1)
        self._ts_base = int(time.time()) - 1000
        self._sockets: list[web.WebSocketResponse] = []
        self._pending_acks: dict[str, Delivery] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopping = False
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/link/", self._socket_link)
        app.router.add_get("/files-pri/{file_id}/{name}", self._file)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self._session = aiohttp.ClientSession()

    async def stop(self) -> None:
        self._stopping = True  # late handlers (delay faults) must not start new deliveries
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()  # lets in-flight API handlers finish
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> FakeSlack:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def api_url(self) -> str:
        """What ``SLACK_API_BASE_URL`` should be."""
        return f"http://127.0.0.1:{self.port}/api/"

    def upload(self, name: str, content: bytes, mimetype: str) -> dict[str, Any]:
        """A file as a message's ``files`` entry carries it (``url_private`` on this fake)."""
        file_id = f"F{len(self.files) + 1:07d}"
        self.files[file_id] = (mimetype, content)
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "size": len(content),
            "url_private": f"http://127.0.0.1:{self.port}/files-pri/{file_id}/{name}",
        }

    async def _file(self, request: web.Request) -> web.Response:
        # like Slack: without the bot token, a sign-in page (HTML, 200), not the file
        if request.headers.get("Authorization") != f"Bearer {self.bot_token}":
            return web.Response(text="<html>sign in</html>", content_type="text/html")
        found = self.files.get(request.match_info["file_id"])
        if found is None:
            return web.Response(status=404)
        self.file_downloads.append(request.match_info["file_id"])
        mimetype, content = found
        return web.Response(body=content, content_type=mimetype)

    def _spawn(self, coro: Awaitable[Any], *, name: str) -> asyncio.Task[Any]:
        async def run() -> Any:
            return await coro

        task = asyncio.create_task(run(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- state helpers --------------------------------------------------------------------

    def add_channel(
        self,
        channel_id: str,
        *,
        kind: Literal["channel", "group", "im", "mpim"] = "channel",
        members: Iterable[str] = (HUMAN,),
        bot_member: bool = True,
    ) -> Channel:
        members_set = set(members)
        if bot_member:
            members_set.add(self.bot_user_id)
        channel = Channel(id=channel_id, kind=kind, members=members_set)
        self.channels[channel_id] = channel
        return channel

    def next_ts(self) -> str:
        n = next(self._ts_counter)
        return f"{self._ts_base + n}.{n:06d}"

    def bot_posts(self, channel: str | None = None) -> list[Message]:
        channels = [self.channels[channel]] if channel else list(self.channels.values())
        return [m for ch in channels for m in ch.messages if m.user == self.bot_user_id]

    def calls_to(self, method: str) -> list[ApiCall]:
        return [c for c in self.calls if c.method == method]

    def fail_next(
        self,
        method: str,
        *,
        error: str | None = None,
        status: int = 200,
        retry_after: float | None = None,
        delay: float = 0.0,
        times: int = 1,
    ) -> None:
        """The next ``times`` calls to ``method`` fail: ``status=429`` -> ratelimited with
        ``Retry-After``; ``error`` -> ``{"ok": false, "error": error}``; ``delay`` -> answer late
        (combine with no error to make a slow success)."""
        fault = Fault(error=error, status=status, retry_after=retry_after, delay=delay)
        self._faults.setdefault(method, []).extend([fault] * times)

    def answer_late(self, method: str, seconds: float, *, times: int = 1) -> None:
        """The next ``times`` calls to ``method`` take effect at once and are answered
        ``seconds`` later: a request that reached Slack while its caller stopped waiting."""
        self._late.setdefault(method, []).extend([seconds] * times)

    def pending_faults(self, method: str) -> int:
        """Faults scheduled for ``method`` that no call has met yet."""
        return len(self._faults.get(method, ()))

    # --- Web API ------------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            raw = await request.read()
            ctype = request.content_type
            if ctype == "application/json":
                body = json.loads(raw or b"{}")
                if isinstance(body, dict):
                    params.update(body)
            elif raw:
                params.update(dict(parse_qsl(raw.decode("utf-8"), keep_blank_values=True)))
        return params

    @staticmethod
    def _token(request: web.Request, params: Mapping[str, Any]) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer ") :]
        token = params.get("token")
        return str(token) if token else None

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        call = ApiCall(
            method=method,
            http_method=request.method,
            headers=dict(request.headers),
            params=params,
        )
        self.calls.append(call)
        response = await self._dispatch_api(method, request, params)
        late = self._late.get(method)
        if late:
            await asyncio.sleep(late.pop(0))
        call.status = response.status
        call.response = json.loads(response.body) if isinstance(response.body, bytes) else None
        return response

    async def _dispatch_api(
        self, method: str, request: web.Request, params: dict[str, Any]
    ) -> web.Response:
        token = self._token(request, params)
        faults = self._faults.get(method)
        if faults:
            fault = faults.pop(0)
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.status == 429:
                return web.json_response(
                    {"ok": False, "error": "ratelimited"},
                    status=429,
                    headers={"Retry-After": str(int(fault.retry_after or 1))},
                )
            if fault.error is not None or fault.status != 200:
                return web.json_response(
                    {"ok": False, "error": fault.error or "internal_error"}, status=fault.status
                )
        if method == "apps.connections.open":
            if token != self.app_token:
                return _error("invalid_auth")
            ticket = uuid.uuid4().hex
            return web.json_response(
                {"ok": True, "url": f"ws://127.0.0.1:{self.port}/link/?ticket={ticket}"}
            )
        if token != self.bot_token:
            return _error("invalid_auth" if token else "not_authed")
        if method == "auth.test":
            return web.json_response(
                {
                    "ok": True,
                    "url": "https://fake.slack.test/",
                    "team": "Fake Team",
                    "user": "gatewaybot",
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "bot_id": self.bot_id,
                    "is_enterprise_install": False,
                },
                headers=self._scope_headers(),
            )
        if method == "chat.postMessage":
            return self._post_message(params)
        if method == "conversations.replies":
            return self._replies(params)
        if method == "assistant.threads.setStatus":
            return self._set_status(params)
        if method == "files.getUploadURLExternal":
            return self._upload_url(params)
        if method == "files.completeUploadExternal":
            return self._complete_upload(params)
        if method == "chat.update":
            return self._update(params)
        if method == "chat.delete":
            return self._delete(params)
        if method in ("chat.startStream", "chat.appendStream", "chat.stopStream"):
            if self.refuse_streaming is not None:
                return _error(self.refuse_streaming)
            return self._stream(method, params)
        if method == "agents.sessions.setStatus":
            return self._set_session(params)
        if method == "assistant.threads.setSuggestedPrompts":
            return self._suggest(params)
        if method == "assistant.threads.setTitle":
            return self._set_title(params)
        if method == "chat.postEphemeral":
            self.ephemerals.append(dict(params))
            return web.json_response({"ok": True, "message_ts": self.next_ts()})
        return _error("unknown_method", status=404)

    def _scope_headers(self) -> dict[str, str]:
        if self.granted_scopes is None:
            return {}
        return {"x-oauth-scopes": ",".join(self.granted_scopes)}

    def _update(self, params: Mapping[str, Any]) -> web.Response:
        """chat.update: new text and blocks (blocks omitted: the old ones are removed)."""
        channel = self.channels.get(str(params.get("channel", "")))
        message = channel.find(str(params.get("ts", ""))) if channel is not None else None
        if channel is None or message is None:
            return _error("message_not_found")
        if message.user != self.bot_user_id:
            return _error("cant_update_message")
        if message.streaming:
            # not documented either way; the fake is strict: a stream is stopped before its
            # message is rewritten (chat.stopStream), so code that works here works on Slack
            return _error("cant_update_message")
        message.text = str(params.get("text") or message.text)
        blocks = params.get("blocks")
        message.blocks = json.loads(blocks) if isinstance(blocks, str) else blocks
        message.edited = True
        self.updates.append((channel.id, message.ts, message.thread_ts, message.text))
        return web.json_response({"ok": True, "channel": channel.id, "ts": message.ts})

    def _delete(self, params: Mapping[str, Any]) -> web.Response:
        """chat.delete: the bot's own message leaves the channel."""
        channel = self.channels.get(str(params.get("channel", "")))
        message = channel.find(str(params.get("ts", ""))) if channel is not None else None
        if channel is None or message is None:
            return _error("message_not_found")
        if message.user != self.bot_user_id:
            return _error("cant_delete_message")
        channel.messages.remove(message)
        self.deleted.append((channel.id, message.ts))
        return web.json_response({"ok": True, "channel": channel.id, "ts": message.ts})

    def _interaction_payload(
        self,
        message: Message,
        action_id: str,
        *,
        user: str,
        value: str | None,
        positive: bool = True,
        channel: str | None = None,
    ) -> dict[str, Any]:
        found = next(
            (
                (b, a)
                for b in message.blocks or []
                if b.get("type") in ("actions", "context_actions")
                for a in b.get("elements", [])
                if a.get("action_id") == action_id
            ),
            None,
        )
        kind, block_id = "button", "approval"
        if found is not None:
            block, element = found
            kind, block_id = str(element.get("type", "button")), str(block.get("block_id", ""))
            if value is None and kind == "feedback_buttons":
                # a feedback buttons element: the pressed button's own value
                side = element.get("positive_button" if positive else "negative_button") or {}
                value = side.get("value")
            elif value is None:
                value = element.get("value")
        channel = channel or message.channel
        return {
            "type": "block_actions",
            "team": {"id": self.team_id},
            "user": {"id": user, "team_id": self.team_id},
            "api_app_id": "A0FAKE",
            "container": {
                "type": "message",
                "message_ts": message.ts,
                "channel_id": channel,
                "is_ephemeral": False,
                "thread_ts": message.thread_ts,
            },
            "channel": {"id": channel},
            "message": {
                "type": "message",
                "ts": message.ts,
                "thread_ts": message.thread_ts,
                "text": message.text,
            },
            "response_url": f"http://127.0.0.1:{self.port}/response/{message.ts}",
            "trigger_id": "1.2.3",
            "actions": [
                {
                    "type": kind,
                    "action_id": action_id,
                    "block_id": block_id,
                    "value": value,
                    "action_ts": self.next_ts(),
                }
            ],
        }

    async def click_button_socket(
        self, message: Message, action_id: str, *, user: str = HUMAN, value: str | None = None
    ) -> Delivery:
        """The same press delivered as a Socket Mode ``interactive`` envelope (acked)."""
        payload = self._interaction_payload(message, action_id, user=user, value=value)
        delivery = Delivery(
            event_id=f"interactive-{message.ts}", payload=payload, transport="socket"
        )
        await self._deliver_socket(delivery, "interactive")
        return delivery

    async def click_button(
        self,
        url: str,
        message: Message,
        action_id: str,
        *,
        user: str = HUMAN,
        signed: bool = True,
        value: str | None = None,
        positive: bool = True,
        channel: str | None = None,
    ) -> tuple[int, bytes]:
        """A person presses a button of the bot's message: Slack POSTs a signed
        ``application/x-www-form-urlencoded`` body with ``payload`` = the ``block_actions``
        JSON to the app's interactivity URL. ``value``: press a button as it was before the
        message was updated (a second click on a stale card). A ``feedback_buttons`` element
        is pressed on its ``positive`` or negative side; ``channel`` forges the channel the
        click names (a click that says it came from elsewhere)."""
        assert self._session is not None
        payload = self._interaction_payload(
            message, action_id, user=user, value=value, positive=positive, channel=channel
        )
        body = urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if signed:
            headers.update(self.sign(body))
        async with self._session.post(url, data=body, headers=headers) as resp:
            return resp.status, await resp.read()

    def _post_message(self, params: Mapping[str, Any]) -> web.Response:
        channel = self.channels.get(str(params.get("channel", "")))
        if channel is None:
            return _error("channel_not_found")
        if self.bot_user_id not in channel.members:
            return _error("not_in_channel")
        text = params.get("text")
        if not isinstance(text, str) or not text:
            return _error("no_text")
        thread_ts = params.get("thread_ts") or None
        if thread_ts is not None:
            thread_ts = str(thread_ts)
            parent = channel.find(thread_ts)
            if parent is None:
                self.thread_violations.append(
                    ThreadViolation(channel.id, thread_ts, "thread root does not exist")
                )
            elif parent.is_reply:
                # Slack's docs: "Avoid using a reply's ts value; use its parent instead."
                self.thread_violations.append(
                    ThreadViolation(channel.id, thread_ts, "thread_ts is a reply's own ts")
                )
        blocks = params.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if blocks is not None and _blocks_problem(blocks) is not None:
            return _error("invalid_blocks")
        metadata = params.get("metadata")
        if isinstance(metadata, str):
            metadata = json.loads(metadata)
        message = Message(
            channel=channel.id,
            ts=self.next_ts(),
            text=text,
            user=self.bot_user_id,
            bot_id=self.bot_id,
            thread_ts=thread_ts,
            metadata=metadata,
            blocks=blocks if isinstance(blocks, list) else None,
        )
        channel.messages.append(message)
        if self.echo_bot_messages and not self._stopping:
            payloads = self._message_events(channel, message, mentions=False)
            if payloads:
                self._spawn(self._deliver_all(payloads), name=f"echo-{message.ts}")
        return web.json_response(
            {
                "ok": True,
                "channel": channel.id,
                "ts": message.ts,
                "message": self._api_message(message, channel),
            }
        )

    def _set_status(self, params: Mapping[str, Any]) -> web.Response:
        if self.set_status_error is not None:
            return _error(self.set_status_error)
        found = self._assistant_thread(params)
        if isinstance(found, web.Response):
            return found
        channel, thread_ts = found
        status = params.get("status")
        if not isinstance(status, str):
            return _error("invalid_arguments")
        self.statuses.append((channel.id, thread_ts, status))
        return web.json_response({"ok": True})

    # --- streaming (chat.startStream / appendStream / stopStream) ------------------------------

    @staticmethod
    def _stream_text(params: Mapping[str, Any]) -> str:
        """What a streaming call adds: ``markdown_text`` and the ``markdown_text`` chunks (the
        sdk's helper sends chunks)."""
        text = params.get("markdown_text")
        added = text if isinstance(text, str) else ""
        chunks = params.get("chunks")
        if isinstance(chunks, str):
            chunks = json.loads(chunks)
        for chunk in chunks if isinstance(chunks, list) else []:
            if isinstance(chunk, Mapping) and chunk.get("type") == "markdown_text":
                added += str(chunk.get("text") or "")
        return added

    def _stream(self, method: str, params: Mapping[str, Any]) -> web.Response:
        """The three streaming methods as Slack documents them: ``startStream`` needs
        ``channel`` and ``thread_ts`` (streamed messages are replies), and outside a DM the
        ``recipient_team_id`` and ``recipient_user_id``; it answers the new message's ``ts``.
        ``appendStream`` / ``stopStream`` take ``channel`` and ``ts`` of a message still
        streaming (else ``message_not_in_streaming_state``); ``stopStream`` may add blocks."""
        channel = self.channels.get(str(params.get("channel", "")))
        if channel is None:
            return _error("channel_not_found")
        if self.bot_user_id not in channel.members:
            return _error("not_in_channel")
        added = self._stream_text(params)
        if method == "chat.startStream":
            thread_ts = params.get("thread_ts")
            if not isinstance(thread_ts, str) or not thread_ts:
                return _error("invalid_arguments")
            if channel.kind != "im":
                if not params.get("recipient_team_id"):
                    return _error("missing_recipient_team_id")
                if not params.get("recipient_user_id"):
                    return _error("missing_recipient_user_id")
            parent = channel.find(thread_ts)
            if parent is None or parent.is_reply:
                self.thread_violations.append(
                    ThreadViolation(channel.id, thread_ts, "stream thread_ts is not a root")
                )
            started = Message(
                channel=channel.id,
                ts=self.next_ts(),
                text=added,
                user=self.bot_user_id,
                bot_id=self.bot_id,
                thread_ts=thread_ts,
                streaming=True,
            )
            channel.messages.append(started)
            self.stream_calls.append((method, channel.id, started.ts, added))
            return web.json_response({"ok": True, "channel": channel.id, "ts": started.ts})
        message = channel.find(str(params.get("ts", "")))
        if message is None:
            return _error("message_not_found")
        if not message.streaming:
            return _error("message_not_in_streaming_state")
        message.text += added
        self.stream_calls.append((method, channel.id, message.ts, added))
        if method == "chat.appendStream":
            return web.json_response({"ok": True, "channel": channel.id, "ts": message.ts})
        blocks = params.get("blocks")
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        if blocks:
            if _blocks_problem(blocks) is not None:
                return _error("invalid_blocks")
            message.blocks = blocks
        message.streaming = False
        session_status = params.get("session_status")
        if isinstance(session_status, str) and message.thread_ts is not None:
            self._session_now(channel.id, message.thread_ts, session_status)
        return web.json_response(
            {
                "ok": True,
                "channel": channel.id,
                "ts": message.ts,
                "message": self._api_message(message, channel),
            }
        )

    # --- agent sessions (docs.slack.dev/ai/agent-sessions) ------------------------------------

    def _session_now(self, channel: str, thread_ts: str, status: str) -> None:
        self.agent_sessions[(channel, thread_ts)] = status
        self.session_statuses.append((channel, thread_ts, status))

    def _set_session(self, params: Mapping[str, Any]) -> web.Response:
        """``agents.sessions.setStatus``: a thread-based session's status (``active``,
        ``processing``, ``suspended`` or ``closed``), created on first use; the thread is named
        by ``channel_id`` and the root's ``thread_ts``. Without the ``agent_session_stopped``
        subscription Slack answers with a warning (its stop button is not shown)."""
        if self.refuse_agent_sessions is not None:
            return _error(self.refuse_agent_sessions)
        found = self._assistant_thread(params)
        if isinstance(found, web.Response):
            return found
        channel, thread_ts = found
        root = channel.find(thread_ts)
        if root is None or root.is_reply:  # a session is named by its thread's root
            return _error("invalid_thread_ts")
        status = params.get("status")
        if status not in ("active", "processing", "suspended", "closed"):
            return _error("invalid_arguments")
        self._session_now(channel.id, thread_ts, str(status))
        body: dict[str, Any] = {"ok": True, "status": status}
        if "agent_session_stopped" not in self.subscriptions:
            body["warning"] = "missing_agent_session_stopped_event_subscription"
        return web.json_response(body)

    async def user_presses_stop(
        self, channel: str, thread_ts: str, *, user: str = HUMAN
    ) -> Delivery:
        """A person presses the stop button of the thread's agent session. Slack shows it only
        while the session is ``processing`` (and the app takes the event); the press stops the
        app's streams in the thread and sends ``agent_session_stopped`` listing them. The
        session stays ``processing``: moving it on is the app's part."""
        status = self.agent_sessions.get((channel, thread_ts))
        if status != "processing" or "agent_session_stopped" not in self.subscriptions:
            raise AssertionError(f"no stop button shows in {channel}/{thread_ts} ({status})")
        stopped = []
        for message in self.channels[channel].thread(thread_ts):
            if message.streaming and message.user == self.bot_user_id:
                message.streaming = False
                stopped.append(message.ts)
        event = {
            "type": "agent_session_stopped",
            "channel": channel,
            "user": user,
            "thread_ts": thread_ts,
            "streaming_message_ts": stopped,
            "event_ts": self.next_ts(),
        }
        return await self.deliver(self.wrap(event))

    # --- assistant threads --------------------------------------------------------------------

    def _assistant_thread(self, params: Mapping[str, Any]) -> tuple[Channel, str] | web.Response:
        channel = self.channels.get(str(params.get("channel_id", "")))
        if channel is None:
            return _error("channel_not_found")
        thread_ts = str(params.get("thread_ts") or "")
        if channel.find(thread_ts) is None:
            return _error("invalid_thread_ts")
        return channel, thread_ts

    def _suggest(self, params: Mapping[str, Any]) -> web.Response:
        """``assistant.threads.setSuggestedPrompts``: 1-4 prompts, each a ``title`` and the
        ``message`` it sends."""
        found = self._assistant_thread(params)
        if isinstance(found, web.Response):
            return found
        prompts = params.get("prompts")
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if (
            not isinstance(prompts, list)
            or not 1 <= len(prompts) <= 4
            or not all(
                isinstance(p, Mapping) and p.get("title") and p.get("message") for p in prompts
            )
        ):
            return _error("invalid_arguments")
        title = params.get("title")
        self.suggested_prompts.append(
            (found[0].id, found[1], [dict(p) for p in prompts], str(title) if title else None)
        )
        return web.json_response({"ok": True})

    def _set_title(self, params: Mapping[str, Any]) -> web.Response:
        found = self._assistant_thread(params)
        if isinstance(found, web.Response):
            return found
        title = params.get("title")
        if not isinstance(title, str) or not title:
            return _error("invalid_arguments")
        self.titles.append((found[0].id, found[1], title))
        return web.json_response({"ok": True})

    async def user_opens_assistant_thread(
        self, channel: str, *, user: str = HUMAN, context_channel: str | None = None
    ) -> tuple[str, Delivery]:
        """A person opens the app's assistant container: Slack starts a thread in the DM
        (its root is the app's) and sends ``assistant_thread_started``. Returns the thread's
        root ts and the delivery."""
        ch = self.channels[channel]
        root = Message(
            channel=channel,
            ts=self.next_ts(),
            text="",
            user=self.bot_user_id,
            bot_id=self.bot_id,
        )
        ch.messages.append(root)
        event = {
            "type": "assistant_thread_started",
            "assistant_thread": {
                "user_id": user,
                "context": {
                    "channel_id": context_channel,
                    "team_id": self.team_id,
                    "enterprise_id": None,
                },
                "channel_id": channel,
                "thread_ts": root.ts,
            },
            "event_ts": self.next_ts(),
        }
        return root.ts, await self.deliver(self.wrap(event))

    async def click_feedback(
        self,
        url: str,
        message: Message,
        *,
        positive: bool = True,
        user: str = HUMAN,
        channel: str | None = None,
    ) -> tuple[int, bytes]:
        """Press the thumbs up (``positive``) or down of the answer's feedback buttons."""
        action = next(
            a["action_id"]
            for b in message.blocks or []
            if b.get("type") == "context_actions"
            for a in b.get("elements", [])
            if a.get("type") == "feedback_buttons"
        )
        return await self.click_button(
            url, message, action, user=user, positive=positive, channel=channel
        )

    def _upload_url(self, params: Mapping[str, Any]) -> web.Response:
        filename = str(params.get("filename") or "")
        try:
            length = int(params.get("length") or 0)
        except (TypeError, ValueError):
            length = 0
        if not filename or length <= 0:
            return _error("invalid_arguments")
        file_id = f"F{len(self.uploads) + 1:08d}"
        self.uploads[file_id] = Upload(id=file_id, filename=filename, length=length)
        return web.json_response(
            {
                "ok": True,
                "upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}",
                "file_id": file_id,
            }
        )

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.match_info["file_id"])
        if upload is None:
            return web.Response(status=404, text="no such upload")
        upload.data = await request.read()
        return web.Response(text=f"OK - {len(upload.data)}")

    def _complete_upload(self, params: Mapping[str, Any]) -> web.Response:
        files = params.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        if not isinstance(files, list) or not files:
            return _error("invalid_arguments")
        channel_id = params.get("channel_id")
        channel = self.channels.get(str(channel_id)) if channel_id else None
        if channel_id and channel is None:
            return _error("channel_not_found")
        if channel is not None and self.bot_user_id not in channel.members:
            return _error("not_in_channel")
        thread_ts = str(params.get("thread_ts") or "") or None
        if thread_ts is not None and (channel is None or channel.find(thread_ts) is None):
            return _error("invalid_thread_ts")
        shared = []
        for item in files:
            upload = self.uploads.get(str(item.get("id"))) if isinstance(item, Mapping) else None
            if upload is None or upload.data is None or len(upload.data) != upload.length:
                return _error("file_upload_size_mismatch" if upload else "file_not_found")
            upload.title = item.get("title")
            shared.append(upload)
        comment = params.get("initial_comment")
        for upload in shared:
            upload.channel = channel.id if channel else None
            upload.thread_ts = thread_ts
            upload.initial_comment = comment if isinstance(comment, str) else None
        if channel is not None:
            # the share shows up as the bot's message (with the files) where it was put
            message = Message(
                channel=channel.id,
                ts=self.next_ts(),
                text=comment if isinstance(comment, str) else "",
                user=self.bot_user_id,
                bot_id=self.bot_id,
                thread_ts=thread_ts,
                files=[{"id": u.id, "name": u.filename, "title": u.title} for u in shared],
            )
            channel.messages.append(message)
        return web.json_response(
            {"ok": True, "files": [{"id": u.id, "title": u.title} for u in shared]}
        )

    def _replies(self, params: Mapping[str, Any]) -> web.Response:
        channel = self.channels.get(str(params.get("channel", "")))
        if channel is None:
            return _error("channel_not_found")
        root = str(params.get("ts", ""))
        if channel.find(root) is None:
            return _error("thread_not_found")
        thread = channel.thread(root)
        limit = int(params.get("limit") or 1000)
        start = int(str(params.get("cursor") or "0").removeprefix("page:") or 0)
        page = thread[start : start + limit]
        more = start + limit < len(thread)
        return web.json_response(
            {
                "ok": True,
                "messages": [self._api_message(m, channel) for m in page],
                "has_more": more,
                "response_metadata": {"next_cursor": f"page:{start + limit}" if more else ""},
            }
        )

    def _api_message(self, message: Message, channel: Channel) -> dict[str, Any]:
        data: dict[str, Any] = {"type": "message", "text": message.text, "ts": message.ts}
        if message.user:
            data["user"] = message.user
        if message.bot_id:
            data["bot_id"] = message.bot_id
            data["app_id"] = APP_ID
        if message.subtype:
            data["subtype"] = message.subtype
        if message.metadata is not None:
            data["metadata"] = message.metadata
        if message.files:
            data["files"] = message.files
        if message.blocks:
            data["blocks"] = message.blocks
        replies = [m for m in channel.messages if m.thread_ts == message.ts and m is not message]
        if replies:
            data["thread_ts"] = message.ts
            data["reply_count"] = len(replies)
            data["latest_reply"] = replies[-1].ts
        elif message.thread_ts:
            data["thread_ts"] = message.thread_ts
            parent = channel.find(message.thread_ts)
            if parent is not None and parent.user:
                data["parent_user_id"] = parent.user
        data["team"] = self.team_id
        return data

    # --- events ---------------------------------------------------------------------------

    def wrap(self, event: dict[str, Any]) -> dict[str, Any]:
        """An ``event_callback`` body exactly as the Events API sends it."""
        event_type = event.get("type", "message")
        return {
            "token": "verification-token",
            "team_id": self.team_id,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": f"4-{event_type}-{self.team_id}-{event.get('channel', '')}",
        }

    def _message_events(
        self, channel: Channel, message: Message, *, mentions: bool = True
    ) -> list[dict[str, Any]]:
        """The event bodies one new message produces, given the subscriptions."""
        payloads: list[dict[str, Any]] = []
        base: dict[str, Any] = {
            "type": "message",
            "text": message.text,
            "ts": message.ts,
            "channel": channel.id,
            "event_ts": message.ts,
            "team": self.team_id,
        }
        if message.user:
            base["user"] = message.user
        if message.bot_id:
            base["bot_id"] = message.bot_id
            base["app_id"] = APP_ID
            base["bot_profile"] = {"id": message.bot_id, "name": "some bot", "app_id": APP_ID}
        if message.thread_ts:
            base["thread_ts"] = message.thread_ts
            parent = channel.find(message.thread_ts)
            if parent is not None and parent.user:
                base["parent_user_id"] = parent.user
        if message.files:
            base["files"] = message.files
        if not message.bot_id:
            base["client_msg_id"] = str(uuid.uuid4())
        mentioned = f"<@{self.bot_user_id}>" in message.text
        if (
            mentions
            and mentioned
            and channel.kind != "im"  # DMs never produce app_mention (platforms.md §2.6)
            and "app_mention" in self.subscriptions
        ):
            mention = {k: v for k, v in base.items() if k != "channel_type"}
            mention["type"] = "app_mention"
            payloads.append(self.wrap(mention))
        if _SUBSCRIPTION_OF_KIND[channel.kind] in self.subscriptions:
            event = dict(base)
            if message.subtype:
                event["subtype"] = message.subtype
            event["channel_type"] = channel.kind
            payloads.append(self.wrap(event))
            if self.emit_message_replied and message.is_reply:
                parent = channel.find(message.thread_ts or "")
                if parent is not None:
                    payloads.append(self.wrap(self._message_replied(channel, parent, message)))
        return payloads

    def _message_replied(self, channel: Channel, parent: Message, reply: Message) -> dict[str, Any]:
        ts = self.next_ts()
        # Over the Events API this notification carries NO subtype (docs.slack.dev/reference/
        # events/message/message_replied), only hidden: true and the parent as ``message``.
        return {
            "type": "message",
            "message": {
                "type": "message",
                "user": parent.user,
                "text": parent.text,
                "thread_ts": parent.ts,
                "reply_count": len(channel.thread(parent.ts)) - 1,
                "replies": [{"user": reply.user, "ts": reply.ts}],
                "ts": parent.ts,
            },
            "hidden": True,
            "channel": channel.id,
            "event_ts": ts,
            "ts": ts,
            "channel_type": channel.kind,
        }

    # --- the user side ------------------------------------------------------------------------

    async def user_posts(
        self,
        channel: str,
        text: str,
        *,
        user: str = HUMAN,
        thread_ts: str | None = None,
        subtype: str | None = None,
        files: list[dict[str, Any]] | None = None,
    ) -> Posted:
        ch = self.channels[channel]
        message = Message(
            channel=channel,
            ts=self.next_ts(),
            text=text,
            user=user,
            thread_ts=thread_ts,
            subtype=subtype,
            files=files,
        )
        ch.messages.append(message)
        deliveries = await self._deliver_all(self._message_events(ch, message))
        return Posted(ts=message.ts, message=message, deliveries=deliveries)

    async def other_bot_posts(
        self, channel: str, text: str, *, bot_id: str = "B0OTHER", thread_ts: str | None = None
    ) -> Posted:
        ch = self.channels[channel]
        message = Message(
            channel=channel,
            ts=self.next_ts(),
            text=text,
            user="U0OTHERBOT",
            bot_id=bot_id,
            thread_ts=thread_ts,
        )
        ch.messages.append(message)
        deliveries = await self._deliver_all(self._message_events(ch, message))
        return Posted(ts=message.ts, message=message, deliveries=deliveries)

    async def user_edits(self, channel: str, ts: str, text: str) -> list[Delivery]:
        ch = self.channels[channel]
        message = ch.find(ts)
        assert message is not None, f"no message {ts} in {channel}"
        previous = self._api_message(message, ch)
        message.text = text
        edited_at = self.next_ts()
        event = {
            "type": "message",
            "subtype": "message_changed",
            "hidden": True,
            "message": {
                **self._api_message(message, ch),
                "edited": {"user": message.user, "ts": edited_at},
            },
            "previous_message": previous,
            "channel": channel,
            "channel_type": ch.kind,
            "event_ts": edited_at,
            "ts": edited_at,
        }
        return await self._deliver_all([self.wrap(event)])

    async def user_deletes(self, channel: str, ts: str) -> list[Delivery]:
        ch = self.channels[channel]
        message = ch.find(ts)
        assert message is not None, f"no message {ts} in {channel}"
        previous = self._api_message(message, ch)
        ch.messages.remove(message)
        deleted_at = self.next_ts()
        event = {
            "type": "message",
            "subtype": "message_deleted",
            "hidden": True,
            "deleted_ts": ts,
            "previous_message": previous,
            "channel": channel,
            "channel_type": ch.kind,
            "event_ts": deleted_at,
            "ts": deleted_at,
        }
        return await self._deliver_all([self.wrap(event)])

    async def user_joins(self, channel: str, user: str = HUMAN) -> list[Delivery]:
        ch = self.channels[channel]
        ch.members.add(user)
        ts = self.next_ts()
        event = {
            "type": "message",
            "subtype": "channel_join",
            "user": user,
            "text": f"<@{user}> has joined the channel",
            "ts": ts,
            "event_ts": ts,
            "channel": channel,
            "channel_type": ch.kind,
        }
        ch.messages.append(
            Message(channel=channel, ts=ts, text=event["text"], user=user, subtype="channel_join")
        )
        return await self._deliver_all([self.wrap(event)])

    def seed_thread(
        self,
        channel: str,
        texts: Iterable[tuple[str, str]],
        *,
        root_text: str,
        root_user: str = HUMAN,
    ) -> tuple[str, list[str]]:
        """A thread that existed before the app saw it (no events): returns (root, reply ts)."""
        ch = self.channels[channel]
        root = Message(channel=channel, ts=self.next_ts(), text=root_text, user=root_user)
        ch.messages.append(root)
        replies = []
        for user, text in texts:
            reply = Message(
                channel=channel, ts=self.next_ts(), text=text, user=user, thread_ts=root.ts
            )
            ch.messages.append(reply)
            replies.append(reply.ts)
        return root.ts, replies

    # --- delivery ---------------------------------------------------------------------------

    async def _deliver_all(self, payloads: list[dict[str, Any]]) -> list[Delivery]:
        if self.concurrent_mention_events and len(payloads) > 1:
            return list(await asyncio.gather(*(self.deliver(p) for p in payloads)))
        return [await self.deliver(p) for p in payloads]

    async def deliver(
        self, payload: dict[str, Any], *, envelope_type: str = "events_api"
    ) -> Delivery:
        """Send one body the way the configured mode does; returns when answered/acked.
        ``envelope_type`` is the Socket Mode envelope type (``slash_commands``, ...)."""
        transport = self.mode
        delivery = Delivery(
            event_id=str(payload.get("event_id", "")), payload=payload, transport=transport
        )
        self.deliveries.append(delivery)
        if transport == "http" and self.events_url is not None:
            await self._deliver_http(delivery)
        elif transport == "socket":
            await self._deliver_socket(delivery, envelope_type)
        return delivery

    def sign(self, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
        """``X-Slack-Signature`` v0 over exactly these bytes (platforms.md §2.2)."""
        ts = str(int(time.time()) if timestamp is None else timestamp)
        base = b"v0:" + ts.encode() + b":" + body
        digest = hmac.new(self.signing_secret.encode(), base, hashlib.sha256).hexdigest()
        return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}

    async def post_raw(
        self, body: bytes, headers: Mapping[str, str] | None = None
    ) -> tuple[int, bytes]:
        """One unsigned-unless-you-sign-it POST to ``events_url`` (for signature tests)."""
        assert self._session is not None and self.events_url is not None
        async with self._session.post(
            self.events_url,
            data=body,
            headers={"Content-Type": "application/json", **(headers or {})},
        ) as resp:
            return resp.status, await resp.read()

    async def resend(self, delivery: Delivery, *, reason: str = "http_timeout") -> None:
        """Deliver the same event again, as Slack does when it never saw (or lost) the 2xx or
        the ack: same bytes and ``event_id``, the next ``X-Slack-Retry-Num`` /
        ``retry_attempt``."""
        retry_num = len(delivery.attempts)
        if delivery.transport == "http":
            await self._post_attempt(delivery, retry_num, reason)
        else:
            assert delivery.envelope_id is not None
            await self._send_envelope(delivery, "events_api", retry_num, reason)

    async def _deliver_http(self, delivery: Delivery) -> None:
        delivery.body = json.dumps(delivery.payload).encode()
        reason = ""
        for retry_num in range(len(self.http_retry_delays) + 1):
            if retry_num:
                await asyncio.sleep(self.http_retry_delays[retry_num - 1])
            status, no_retry, reason = await self._post_attempt(delivery, retry_num, reason)
            if status is not None and (200 <= status < 300 or no_retry):
                return

    async def _post_attempt(
        self, delivery: Delivery, retry_num: int, reason: str
    ) -> tuple[int | None, bool, str]:
        """One signed POST; ``reason`` explains why this is a retry. Returns the status (None
        if it timed out or failed to connect), ``X-Slack-No-Retry``, and why it failed."""
        assert self._session is not None and self.events_url is not None
        headers = {"Content-Type": "application/json", **self.sign(delivery.body)}
        if retry_num:
            headers["X-Slack-Retry-Num"] = str(retry_num)
            headers["X-Slack-Retry-Reason"] = reason
        status: int | None = None
        no_retry = False
        failure = "http_error"
        try:
            async with self._session.post(
                self.events_url,
                data=delivery.body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.http_ack_timeout),
            ) as resp:
                await resp.read()
                status = resp.status
                no_retry = resp.headers.get("X-Slack-No-Retry") == "1"
        except TimeoutError:
            failure = "http_timeout"
        except aiohttp.ClientConnectionError:
            failure = "connection_failed"
        delivery.attempts.append(Attempt(retry_num=retry_num, status=status, reason=reason))
        return status, no_retry, failure

    # --- Socket Mode ----------------------------------------------------------------------------

    async def _socket_link(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.socket_connections += 1
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": len(self._sockets),
                    "debug_info": {
                        "host": "applink-fake",
                        "build_number": 1,
                        "approximate_connection_time": 18060,
                    },
                    "connection_info": {"app_id": APP_ID},
                }
            )
        )
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                envelope_id = data.get("envelope_id") if isinstance(data, dict) else None
                delivery = self._pending_acks.get(str(envelope_id))
                if delivery is not None:
                    delivery.ack_count += 1
                    if delivery.acked_at is None:
                        delivery.acked_at = time.monotonic()
                    delivery.acked.set()
        finally:
            self._sockets.remove(ws)
        return ws

    def open_sockets(self) -> list[web.WebSocketResponse]:
        return [ws for ws in self._sockets if not ws.closed]

    async def disconnect_sockets(self, reason: str = "refresh_requested") -> None:
        """Slack's ``disconnect`` message: the client must reconnect to a new URL."""
        for ws in self.open_sockets():
            await ws.send_str(
                json.dumps({"type": "disconnect", "reason": reason, "debug_info": {"host": "fake"}})
            )

    async def send_socket_frame(self, text: str) -> None:
        """One raw text frame on the newest Socket Mode connection (a garbled envelope)."""
        await wait_until(lambda: bool(self.open_sockets()), what="a Socket Mode connection")
        await self.open_sockets()[-1].send_str(text)

    async def close_sockets(self) -> None:
        """Drop every Socket Mode connection without a ``disconnect`` message (a network
        failure, or Slack's side going away)."""
        for ws in self.open_sockets():
            await ws.close()

    async def _deliver_socket(self, delivery: Delivery, envelope_type: str) -> None:
        envelope_id = str(uuid.uuid4())
        delivery.envelope_id = envelope_id
        self._pending_acks[envelope_id] = delivery
        for attempt in range(self.socket_max_retries + 1):
            if await self._send_envelope(delivery, envelope_type, attempt, "timeout"):
                return

    async def _send_envelope(
        self, delivery: Delivery, envelope_type: str, attempt: int, reason: str
    ) -> bool:
        await wait_until(lambda: bool(self.open_sockets()), what="a Socket Mode connection")
        ws = self.open_sockets()[-1]
        retry_reason = reason if attempt else ""
        envelope = {
            "envelope_id": delivery.envelope_id,
            "payload": delivery.payload,
            "type": envelope_type,
            "accepts_response_payload": envelope_type != "events_api",
            "retry_attempt": attempt,
            "retry_reason": retry_reason,
        }
        acks_before = delivery.ack_count
        await ws.send_str(json.dumps(envelope))
        try:
            await wait_until(
                lambda: delivery.ack_count > acks_before,
                within=self.socket_ack_timeout,
                what=f"ack of {delivery.envelope_id}",
            )
        except AssertionError:
            delivery.attempts.append(Attempt(attempt, None, retry_reason))
            return False
        delivery.attempts.append(Attempt(attempt, 200, retry_reason))
        return True


#: Block Kit limits the fake enforces (docs.slack.dev/reference/block-kit/blocks)
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
_RICH_TEXT_ELEMENTS = {
    "rich_text_section",
    "rich_text_preformatted",
    "rich_text_quote",
    "rich_text_list",
}


def _blocks_problem(blocks: Any) -> str | None:
    """Why Slack would answer ``invalid_blocks`` (None when the blocks are valid), for the
    block types the gateway sends: ``section`` with mrkdwn/plain text, ``rich_text``."""
    if not isinstance(blocks, list) or not blocks or len(blocks) > MAX_BLOCKS:
        return "blocks must be a list of 1-50 blocks"
    for block in blocks:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "section":
            text = block.get("text")
            if not isinstance(text, Mapping) or text.get("type") not in ("mrkdwn", "plain_text"):
                return "section needs a text object"
            body = text.get("text")
            if not isinstance(body, str) or not body or len(body) > MAX_SECTION_TEXT:
                return "section text must be 1-3000 characters"
        elif kind == "rich_text":
            elements = block.get("elements")
            if not isinstance(elements, list) or not elements:
                return "rich_text needs elements"
            for element in elements:
                if not isinstance(element, Mapping) or element.get("type") not in (
                    _RICH_TEXT_ELEMENTS
                ):
                    return "unknown rich text element"
                inner = element.get("elements")
                if not isinstance(inner, list) or not inner:
                    return "rich text element needs elements"
                for leaf in inner:
                    if not isinstance(leaf, Mapping) or (
                        leaf.get("type") == "text" and not leaf.get("text")
                    ):
                        return "rich text leaf needs text"
        elif kind == "context_actions":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 5:
                return "context_actions needs 1-5 elements"
            for element in elements:
                kind = element.get("type") if isinstance(element, Mapping) else None
                if kind == "feedback_buttons":
                    for side in ("positive_button", "negative_button"):
                        button = element.get(side)
                        if not isinstance(button, Mapping) or not button.get("value"):
                            return f"feedback_buttons needs a {side} with a value"
                elif kind != "icon_button":
                    return "context_actions holds feedback_buttons and icon_button only"
        elif kind not in ("divider", "header", "context", "image", "actions"):
            return f"unsupported block type {kind!r}"
    return None


def _error(error: str, *, status: int = 200) -> web.Response:
    # Slack answers most errors with HTTP 200 and ok: false.
    return web.json_response({"ok": False, "error": error}, status=status)
