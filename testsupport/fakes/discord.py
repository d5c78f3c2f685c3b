"""A fake Discord: REST API v10 and the gateway WebSocket, on 127.0.0.1:<ephemeral>.

It speaks the documented wire protocol (platforms.md "Discord") to the real client library
(hikari) and to the surface's own REST client, and keeps a state model (users, one guild
with a text channel and a forum, DMs, threads started on messages, messages) so tests assert
where an answer landed:

* REST under ``/api/v10``: ``users/@me``, ``applications/@me`` (``flags``: the
  message-content intent), ``gateway/bot`` (the WebSocket URL), ``channels/{id}``,
  ``GET channels/{id}/messages?after=&limit=`` (newest first, as Discord lists them),
  ``POST channels/{id}/messages`` (JSON or multipart with ``payload_json``; 2000 characters;
  ``nonce`` + ``enforce_nonce`` dedupe; 404 code 10003 for an unknown channel),
  ``PATCH``/``DELETE channels/{id}/messages/{id}``,
  ``POST channels/{id}/messages/{id}/threads`` (the thread's id is the message's; 400 code
  160004 the second time), ``POST channels/{id}/typing``,
  ``POST interactions/{id}/{token}/callback``. ``Authorization: Bot <token>`` or 401.
* The gateway at ``/gateway`` (``compress=zlib-stream`` honoured): HELLO (10), IDENTIFY (2)
  -> READY + GUILD_CREATE, HEARTBEAT (1) -> ACK (11), RESUME (6) -> the missed dispatches
  and RESUMED (or INVALID SESSION (9) ``false`` for a session it does not know), RECONNECT
  (7) on request; dispatches MESSAGE_CREATE/UPDATE/DELETE, THREAD_CREATE,
  INTERACTION_CREATE with a per-session sequence. Without the MESSAGE_CONTENT intent, guild
  messages that do not mention the bot arrive with empty ``content``; an IDENTIFY asking for
  it while the application may not use it is closed with 4014.
* Events of a session whose connection dropped are kept and replayed on RESUME; a session it
  forgot (``forget_session``, ``invalidate``) replays nothing.
* Faults: ``rate_limit_next(method, path_part, retry_after, global_=...)`` (429 with the
  JSON body and headers Discord sends), ``drop()`` (the connection aborted),
  ``request_reconnect()``, ``invalidate()``, ``forget_session()``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import socket
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

EPOCH_MS = 1_420_070_400_000
API = "/api/v10"
MAX_CONTENT = 2000
GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15
CONTENT_FLAG = 1 << 18


class Snowflakes:
    def __init__(self) -> None:
        self._last = 0

    def next(self) -> str:
        value = ((int(time.time() * 1000) - EPOCH_MS) << 22) | 1
        self._last = max(value, self._last + 1)
        return str(self._last)


@dataclass
class User:
    id: str
    username: str
    bot: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "username": self.username,
            "discriminator": "0",
            "global_name": self.username.title(),
            "avatar": None,
            "bot": self.bot,
            "flags": 0,
            "public_flags": 0,
        }


@dataclass
class Channel:
    id: str
    type: int
    guild_id: str | None = None
    parent_id: str | None = None
    name: str | None = None
    recipients: list[User] = field(default_factory=list)
    #: a thread's creator
    owner_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "type": self.type, "flags": 0}
        if self.guild_id:
            data["guild_id"] = self.guild_id
        if self.parent_id:
            data["parent_id"] = self.parent_id
        if self.name is not None:
            data["name"] = self.name
        if self.recipients:
            data["recipients"] = [u.to_json() for u in self.recipients]
        if self.type in (10, 11, 12):
            if self.owner_id is not None:
                data["owner_id"] = self.owner_id
            data["thread_metadata"] = {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": _now(),
                "locked": False,
            }
        return data


@dataclass
class Session:
    id: str
    intents: int
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    conn: Connection | None = None


@dataclass
class Connection:
    ws: web.WebSocketResponse
    request: web.Request
    compress: Any = None
    session: Session | None = None


@dataclass
class Limit:
    method: str
    path_part: str
    retry_after: float
    global_: bool


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _error(status: int, code: int, message: str) -> web.Response:
    return _json({"message": message, "code": code}, status)


class FakeDiscord:
    def __init__(self, *, content_intent: bool = True, heartbeat_ms: int = 5000) -> None:
        self.ids = Snowflakes()
        self.bot = User(self.ids.next(), "gatewaybot", bot=True)
        self.alice = User(self.ids.next(), "alice")
        self.bob = User(self.ids.next(), "bob")
        self.token = (
            base64.b64encode(self.bot.id.encode()).decode().rstrip("=") + ".fake.signature-xyz"
        )
        self.guild_id = self.ids.next()
        self.channels: dict[str, Channel] = {}
        self.general = self._add(Channel(self.ids.next(), 0, self.guild_id, name="general"))
        self.forum = self._add(Channel(self.ids.next(), 15, self.guild_id, name="help"))
        self.messages: dict[str, dict[str, Any]] = {}
        self.content_intent = content_intent
        self.heartbeat_ms = heartbeat_ms
        self.session: Session | None = None
        self._conns: list[Connection] = []
        self._nonces: dict[tuple[str, str], str] = {}
        self._limits: list[Limit] = []
        self._interactions: dict[str, dict[str, Any]] = {}
        # --- recorders
        self.requests: list[tuple[float, str, str]] = []
        self.ops: list[int] = []
        self.identifies = 0
        #: seconds an IDENTIFY waits before its session exists (READY): a gateway that is
        #: slow to come back, while the REST API serves
        self.identify_delay = 0.0
        self.resumes: list[bool] = []
        self.edits: list[tuple[str, str, str]] = []
        self.deleted: list[str] = []
        self.threads_started: list[str] = []
        self.callbacks: dict[str, dict[str, Any]] = {}
        self.limited: list[tuple[float, str, str]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._counter = itertools.count(1)

    def _add(self, channel: Channel) -> Channel:
        self.channels[channel.id] = channel
        return channel

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_url(self) -> str:
        return self.url + API

    @property
    def live(self) -> bool:
        return any(c.session is not None for c in self._conns)

    async def start(self) -> None:
        app = web.Application()
        r = app.router
        r.add_get(API + "/users/@me", self._rest(self._me))
        r.add_get(API + "/applications/@me", self._rest(self._application))
        r.add_get(API + "/gateway/bot", self._rest(self._gateway_bot))
        r.add_get(API + "/channels/{cid}", self._rest(self._channel))
        r.add_get(API + "/channels/{cid}/messages", self._rest(self._history))
        r.add_post(API + "/channels/{cid}/messages", self._rest(self._create))
        r.add_patch(API + "/channels/{cid}/messages/{mid}", self._rest(self._edit))
        r.add_delete(API + "/channels/{cid}/messages/{mid}", self._rest(self._delete))
        r.add_post(API + "/channels/{cid}/messages/{mid}/threads", self._rest(self._thread))
        r.add_post(API + "/channels/{cid}/typing", self._rest(self._typing))
        r.add_post(API + "/interactions/{iid}/{itoken}/callback", self._callback)
        r.add_get("/attachments/{mid}/{name}", self._attachment)
        r.add_get("/gateway", self._gateway)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        for conn in list(self._conns):
            await conn.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeDiscord:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- faults --------------------------------------------------------------------------

    def rate_limit_next(
        self, method: str, path_part: str, retry_after: float, *, global_: bool = False
    ) -> None:
        """The next ``method`` request whose path contains ``path_part`` is answered 429."""
        self._limits.append(Limit(method, path_part, retry_after, global_))

    def drop(self) -> None:
        """The connection is cut (no close frame); the session stays resumable."""
        for conn in list(self._conns):
            if conn.request.transport is not None:
                conn.request.transport.abort()

    async def request_reconnect(self) -> None:
        for conn in list(self._conns):
            await self._send(conn, {"op": 7, "d": None})

    async def invalidate(self) -> None:
        """INVALID SESSION (not resumable): the client must identify anew."""
        self.session = None
        for conn in list(self._conns):
            await self._send(conn, {"op": 9, "d": False})

    def forget_session(self) -> None:
        """The session is gone and the connection cut: a RESUME is refused."""
        self.session = None
        self.drop()

    # --- the user side -------------------------------------------------------------------

    def dm(self, user: User) -> Channel:
        for channel in self.channels.values():
            if channel.type == 1 and channel.recipients == [user]:
                return channel
        return self._add(Channel(self.ids.next(), 1, recipients=[user]))

    def _message(
        self, channel: Channel, author: User, content: str, **extra: Any
    ) -> dict[str, Any]:
        mid = self.ids.next()
        message: dict[str, Any] = {
            "id": mid,
            "channel_id": channel.id,
            "author": author.to_json(),
            "content": content,
            "timestamp": _now(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
            "components": [],
            **extra,
        }
        if channel.guild_id:
            message["guild_id"] = channel.guild_id
        self.messages[mid] = message
        return message

    async def user_posts(
        self,
        channel: Channel,
        text: str,
        *,
        user: User | None = None,
        mention_bot: bool = False,
    ) -> dict[str, Any]:
        content = f"<@{self.bot.id}> {text}" if mention_bot else text
        message = self._message(channel, user or self.alice, content)
        if mention_bot:
            message["mentions"] = [self.bot.to_json()]
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def forum_post(self, title: str, text: str, *, user: User | None = None) -> Channel:
        """A forum post: a thread in the forum whose first message has the thread's id."""
        thread = self._add(
            Channel(
                self.ids.next(),
                11,
                self.guild_id,
                self.forum.id,
                title,
                owner_id=(user or self.alice).id,
            )
        )
        await self.dispatch("THREAD_CREATE", {**thread.to_json(), "newly_created": True})
        message = self._message(thread, user or self.alice, text)
        message["id"] = thread.id
        self.messages.pop(next(reversed(self.messages)))
        self.messages[thread.id] = message
        await self.dispatch("MESSAGE_CREATE", message)
        return thread

    async def user_starts_thread(self, message: dict[str, Any], name: str) -> Channel:
        """A person starts a public thread on ``message`` (its id is the message's)."""
        parent = self.channels[message["channel_id"]]
        thread = self._add(
            Channel(
                message["id"],
                11,
                parent.guild_id,
                parent.id,
                name,
                owner_id=message["author"]["id"],
            )
        )
        await self.dispatch("THREAD_CREATE", {**thread.to_json(), "newly_created": True})
        return thread

    async def user_edits(self, message: dict[str, Any], text: str) -> None:
        message["content"] = text
        message["edited_timestamp"] = _now()
        await self.dispatch("MESSAGE_UPDATE", dict(message))

    async def user_deletes(self, message: dict[str, Any]) -> None:
        self.messages.pop(message["id"], None)
        data = {"id": message["id"], "channel_id": message["channel_id"]}
        if message.get("guild_id"):
            data["guild_id"] = message["guild_id"]
        await self.dispatch("MESSAGE_DELETE", data)

    async def press(
        self, message: dict[str, Any], custom_id: str, *, user: User, channel_id: str | None = None
    ) -> str:
        """A button press: INTERACTION_CREATE; returns the interaction id (``callbacks``)."""
        iid = self.ids.next()
        token = f"itoken-{next(self._counter)}"
        channel = self.channels[channel_id or message["channel_id"]]
        data: dict[str, Any] = {
            "id": iid,
            "application_id": self.bot.id,
            "type": 3,
            "token": token,
            "version": 1,
            "channel_id": channel.id,
            "channel": channel.to_json(),
            "message": dict(message),
            "data": {"custom_id": custom_id, "component_type": 2},
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "context": 0 if channel.guild_id else 1,
        }
        if channel.guild_id:
            data["guild_id"] = channel.guild_id
            data["member"] = {"user": user.to_json(), "roles": [], "joined_at": _now()}
        else:
            data["user"] = user.to_json()
        self._interactions[iid] = {"token": token}
        await self.dispatch("INTERACTION_CREATE", data)
        return iid

    async def answered(self, iid: str, timeout: float = 30.0) -> str:
        """What the presser was told (the interaction's callback)."""
        deadline = time.monotonic() + timeout
        while iid not in self.callbacks:
            if time.monotonic() > deadline:
                raise TimeoutError(f"interaction {iid} never answered")
            await asyncio.sleep(0.02)
        return str(self.callbacks[iid].get("data", {}).get("content", ""))

    # --- reading back --------------------------------------------------------------------

    def in_channel(self, channel_id: str, *, by: User | None = None) -> list[dict[str, Any]]:
        listed = [m for m in self.messages.values() if m["channel_id"] == channel_id]
        if by is not None:
            listed = [m for m in listed if m["author"]["id"] == by.id]
        return sorted(listed, key=lambda m: int(m["id"]))

    def bot_messages(self) -> list[dict[str, Any]]:
        return sorted(
            (m for m in self.messages.values() if m["author"]["id"] == self.bot.id),
            key=lambda m: int(m["id"]),
        )

    def sends(self) -> int:
        return sum(
            1
            for _, method, path in self.requests
            if method == "POST" and path.endswith("/messages")
        )

    # --- the gateway ---------------------------------------------------------------------

    async def dispatch(self, name: str, data: dict[str, Any]) -> None:
        session = self.session
        if session is None:
            return
        if not self._wanted(session, name, data):
            return
        if name == "MESSAGE_CREATE" and not session.intents & MESSAGE_CONTENT:
            data = self._without_content(data)
        session.seq += 1
        event = {"op": 0, "t": name, "s": session.seq, "d": data}
        session.events.append(event)
        if session.conn is not None:
            try:
                await self._send(session.conn, event)
            except ConnectionError:
                session.conn = None

    def _wanted(self, session: Session, name: str, data: dict[str, Any]) -> bool:
        if name.startswith("MESSAGE_"):
            bit = GUILD_MESSAGES if data.get("guild_id") else DIRECT_MESSAGES
            return bool(session.intents & bit)
        return True

    def _without_content(self, data: dict[str, Any]) -> dict[str, Any]:
        if not data.get("guild_id") or any(m["id"] == self.bot.id for m in data["mentions"]):
            return data
        if data["author"]["id"] == self.bot.id:
            return data
        return {**data, "content": ""}

    async def _send(self, conn: Connection, payload: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        if conn.compress is not None:
            await conn.ws.send_bytes(
                conn.compress.compress(raw) + conn.compress.flush(zlib.Z_SYNC_FLUSH)
            )
        else:
            await conn.ws.send_str(raw.decode())

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        conn = Connection(ws=ws, request=request)
        if request.query.get("compress") == "zlib-stream":
            conn.compress = zlib.compressobj()
        self._conns.append(conn)
        try:
            await self._send(conn, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}})
            async for msg in ws:
                if msg.type != WSMsgType.TEXT and msg.type != WSMsgType.BINARY:
                    continue
                try:
                    payload = json.loads(msg.data)
                except ValueError:
                    await ws.close(code=4002)
                    break
                await self._op(conn, payload)
        finally:
            self._conns.remove(conn)
            if conn.session is not None and conn.session.conn is conn:
                conn.session.conn = None
        return ws

    async def _op(self, conn: Connection, payload: dict[str, Any]) -> None:
        op, data = payload.get("op"), payload.get("d")
        if not isinstance(op, int) or (op in (2, 6) and not isinstance(data, dict)):
            await conn.ws.close(code=4002, message=b"Error while decoding payload.")
            return
        self.ops.append(op)
        if op == 1:
            await self._send(conn, {"op": 11})
        elif op == 2 and isinstance(data, dict):
            await self._identify(conn, data)
        elif op == 6 and isinstance(data, dict):
            await self._resume(conn, data)

    async def _identify(self, conn: Connection, data: dict[str, Any]) -> None:
        if data.get("token") != self.token:
            await conn.ws.close(code=4004, message=b"Authentication failed.")
            return
        intents = int(data.get("intents") or 0)
        if intents & MESSAGE_CONTENT and not self.content_intent:
            await conn.ws.close(code=4014, message=b"Disallowed intent(s).")
            return
        self.identifies += 1
        if self.identify_delay:
            await asyncio.sleep(self.identify_delay)
        session = Session(id=f"session-{next(self._counter)}", intents=intents, conn=conn)
        self.session = session
        conn.session = session
        await self.dispatch(
            "READY",
            {
                "v": 10,
                "user": self.bot.to_json(),
                "guilds": [{"id": self.guild_id, "unavailable": True}],
                "session_id": session.id,
                "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gateway",
                "shard": [0, 1],
                "application": {"id": self.bot.id, "flags": self._flags()},
                "private_channels": [],
                "relationships": [],
                "presences": [],
                "guild_join_requests": [],
                "geo_ordered_rtc_regions": [],
                "user_settings": {},
            },
        )
        await self.dispatch("GUILD_CREATE", self._guild())

    async def _resume(self, conn: Connection, data: dict[str, Any]) -> None:
        session = self.session
        if (
            data.get("token") != self.token
            or session is None
            or data.get("session_id") != session.id
        ):
            self.resumes.append(False)
            await self._send(conn, {"op": 9, "d": False})
            return
        self.resumes.append(True)
        seq = int(data.get("seq") or 0)
        session.conn = conn
        conn.session = session
        for event in session.events:
            if event["s"] > seq:
                await self._send(conn, event)
        await self.dispatch("RESUMED", {})

    def _guild(self) -> dict[str, Any]:
        channels = [c for c in self.channels.values() if c.guild_id and c.type not in (10, 11, 12)]
        threads = [c for c in self.channels.values() if c.type in (10, 11, 12)]
        return {
            "id": self.guild_id,
            "name": "Test guild",
            "unavailable": False,
            "channels": [c.to_json() for c in channels],
            # a thread's last_message_id, as Discord lists it (the newest message there)
            "threads": [{**c.to_json(), **self._last_message(c)} for c in threads],
            "members": [],
            "member_count": 3,
            "large": False,
            "joined_at": _now(),
            "roles": [],
            "emojis": [],
            "features": [],
            "owner_id": self.alice.id,
        }

    def _last_message(self, channel: Channel) -> dict[str, Any]:
        ids = [int(m["id"]) for m in self.messages.values() if m["channel_id"] == channel.id]
        return {"last_message_id": str(max(ids))} if ids else {}

    def _flags(self) -> int:
        return CONTENT_FLAG if self.content_intent else 0

    # --- REST ----------------------------------------------------------------------------

    def _rest(self, handler: Any) -> Any:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            self.requests.append((time.monotonic(), request.method, request.path))
            if request.headers.get("Authorization") != f"Bot {self.token}":
                return _error(401, 0, "401: Unauthorized")
            for limit in list(self._limits):
                if request.method == limit.method and limit.path_part in request.path:
                    self._limits.remove(limit)
                    self.limited.append((time.monotonic(), request.method, request.path))
                    headers = {
                        "Retry-After": str(max(1, round(limit.retry_after))),
                        "X-RateLimit-Limit": "5",
                        "X-RateLimit-Remaining": "0",
                        "X-RateLimit-Reset-After": str(limit.retry_after),
                        "X-RateLimit-Bucket": "fake-bucket",
                        "X-RateLimit-Scope": "global" if limit.global_ else "user",
                    }
                    if limit.global_:
                        headers["X-RateLimit-Global"] = "true"
                    return _json(
                        {
                            "message": "You are being rate limited.",
                            "retry_after": limit.retry_after,
                            "global": limit.global_,
                        },
                        429,
                        headers,
                    )
            response: web.StreamResponse = await handler(request)
            return response

        return wrapped

    async def _me(self, request: web.Request) -> web.Response:
        return _json(self.bot.to_json())

    async def _application(self, request: web.Request) -> web.Response:
        return _json(
            {
                "id": self.bot.id,
                "name": "Gateway",
                "flags": self._flags(),
                "bot": self.bot.to_json(),
            }
        )

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        return _json(
            {
                "url": f"ws://127.0.0.1:{self.port}/gateway",
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 0,
                    "max_concurrency": 1,
                },
            }
        )

    async def _channel(self, request: web.Request) -> web.Response:
        channel = self.channels.get(request.match_info["cid"])
        if channel is None:
            return _error(404, 10003, "Unknown Channel")
        return _json(channel.to_json())

    async def _history(self, request: web.Request) -> web.Response:
        cid = request.match_info["cid"]
        if cid not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        after = int(request.query.get("after", "0"))
        limit = max(1, min(100, int(request.query.get("limit", "50"))))
        listed = [m for m in self.in_channel(cid) if int(m["id"]) > after][:limit]
        return _json(list(reversed(listed)))

    async def _create(self, request: web.Request) -> web.Response:
        channel = self.channels.get(request.match_info["cid"])
        if channel is None:
            return _error(404, 10003, "Unknown Channel")
        files: list[tuple[str, bytes, str]] = []
        if request.content_type.startswith("multipart/"):
            body: dict[str, Any] = {}
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                assert isinstance(part, BodyPartReader)
                if part.name == "payload_json":
                    body = json.loads(await part.text())
                else:
                    data = await part.read()
                    mime = part.headers.get("Content-Type", "")
                    files.append((part.filename or "file", bytes(data), mime))
        else:
            body = await request.json()
        content = body.get("content") or ""
        if len(content) > MAX_CONTENT:
            return _error(400, 50035, "Invalid Form Body: content must be 2000 or fewer in length.")
        if not content and not files and not body.get("components"):
            return _error(400, 50006, "Cannot send an empty message")
        nonce = body.get("nonce")
        if nonce and body.get("enforce_nonce") and (channel.id, nonce) in self._nonces:
            return _json(self.messages[self._nonces[(channel.id, nonce)]])
        message = self._message(channel, self.bot, content, components=body.get("components") or [])
        if nonce:
            message["nonce"] = nonce
            self._nonces[(channel.id, nonce)] = message["id"]
        message["attachments"] = [
            {
                "id": self.ids.next(),
                "filename": name,
                "size": len(data),
                "content_type": mime,
                "url": f"{self.url}/attachments/{message['id']}/{name}",
                "_data": base64.b64encode(data).decode(),
            }
            for name, data, mime in files
        ]
        await self.dispatch("MESSAGE_CREATE", message)
        return _json(message)

    async def _attachment(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["mid"])
        for a in (message or {}).get("attachments", []):
            if a["filename"] == request.match_info["name"]:
                return web.Response(
                    body=base64.b64decode(a["_data"]),
                    content_type=a["content_type"] or "application/octet-stream",
                )
        return web.Response(status=404)

    async def _edit(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["mid"])
        if message is None or message["channel_id"] != request.match_info["cid"]:
            return _error(404, 10008, "Unknown Message")
        if message["author"]["id"] != self.bot.id:
            return _error(403, 50005, "Cannot edit a message authored by another user")
        body = await request.json()
        if "content" in body:
            if len(body["content"] or "") > MAX_CONTENT:
                return _error(400, 50035, "Invalid Form Body")
            message["content"] = body["content"]
        if "components" in body:
            message["components"] = body["components"]
        message["edited_timestamp"] = _now()
        self.edits.append((message["channel_id"], message["id"], message["content"]))
        await self.dispatch("MESSAGE_UPDATE", dict(message))
        return _json(message)

    async def _delete(self, request: web.Request) -> web.Response:
        message = self.messages.get(request.match_info["mid"])
        if message is None or message["channel_id"] != request.match_info["cid"]:
            return _error(404, 10008, "Unknown Message")
        del self.messages[message["id"]]
        self.deleted.append(message["id"])
        data = {"id": message["id"], "channel_id": message["channel_id"]}
        if message.get("guild_id"):
            data["guild_id"] = message["guild_id"]
        await self.dispatch("MESSAGE_DELETE", data)
        return web.Response(status=204)

    async def _thread(self, request: web.Request) -> web.Response:
        cid, mid = request.match_info["cid"], request.match_info["mid"]
        parent = self.channels.get(cid)
        message = self.messages.get(mid)
        if parent is None:
            return _error(404, 10003, "Unknown Channel")
        if message is None or message["channel_id"] != cid:
            return _error(404, 10008, "Unknown Message")
        if mid in self.channels:
            return _error(400, 160004, "A thread has already been created for this message")
        body = await request.json()
        name = str(body.get("name") or "")
        if not 1 <= len(name) <= 100:
            return _error(400, 50035, "Invalid Form Body: name")
        thread = self._add(Channel(mid, 11, parent.guild_id, cid, name, owner_id=self.bot.id))
        self.threads_started.append(mid)
        await self.dispatch("THREAD_CREATE", {**thread.to_json(), "newly_created": True})
        return _json(thread.to_json(), 201)

    async def _typing(self, request: web.Request) -> web.Response:
        if request.match_info["cid"] not in self.channels:
            return _error(404, 10003, "Unknown Channel")
        return web.Response(status=204)

    async def _callback(self, request: web.Request) -> web.Response:
        self.requests.append((time.monotonic(), request.method, request.path))
        iid = request.match_info["iid"]
        known = self._interactions.get(iid)
        if known is None or known["token"] != request.match_info["itoken"]:
            return _error(404, 10062, "Unknown interaction")
        if iid in self.callbacks:
            return _error(400, 40060, "Interaction has already been acknowledged.")
        self.callbacks[iid] = await request.json()
        return web.Response(status=204)
