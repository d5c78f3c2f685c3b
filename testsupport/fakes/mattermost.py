"""A fake Mattermost server: REST v4 + the websocket event stream, on 127.0.0.1:<ephemeral>.

It speaks the wire protocol the real server speaks (platforms.md §3, §4.4) and keeps a state
model (users, a team, channels, posts with roots), so tests assert where a reply landed:

* REST: ``users/me``, ``users/me/teams``, ``users/me/teams/{team}/channels`` (DMs and GMs
  included, as the real server does), ``users/me/channels``, ``channels/{id}``,
  ``channels/{id}/posts?since=`` (``UpdateAt > since`` plus the roots of returned replies, at
  most ``since_limit``) and its page form ``?page=&per_page=`` (newest first, deleted posts
  left out, ``per_page`` capped at ``per_page_max``),
  ``POST posts`` with the server's root validation (reply-to-a-reply / unknown root -> 400
  ``api.post.create_post.root_id.app_error``, root elsewhere -> 500
  ``...channel_root_id.app_error``), ``pending_post_id`` dedupe for 30 s, the 16383-rune limit,
  ``props.from_bot`` for bot authors. JSON answers carry ``Content-Type: application/json``
  exactly (no charset).
* Websocket ``/api/v4/websocket``: ``Authorization: Bearer`` at the handshake (401 for a bad
  token) or the ``authentication_challenge`` action (``hello`` sent *before* the ``OK``, a bad
  token closes the socket; a challenge on an authenticated socket is ignored, like the real
  router), ``hello`` with ``seq`` 0 and a per-connection ``seq``; ``posted`` with ``data.post``
  as a JSON string and a stringified ``mentions`` for the mentioned recipient only,
  ``post_edited``, ``post_deleted``; server-side close (1000) or abort (1006).
* Posts created while no websocket is connected are never pushed later.
* Interactive buttons: ``press_button(post_id, action_id, user=...)`` POSTs the server's
  ``PostActionIntegrationRequest`` to the button's integration URL and applies the answer
  (``update``, ``ephemeral_text``); ``PUT posts/{id}/patch`` replaces ``props`` when given.
* Faults: ``fail_next(route, status, ...)``, ``rate_limit_next(...)`` (429 plain text with
  ``Retry-After`` and ``X-RateLimit-*``), ``delay_response_next(route, seconds)``.
* The server's rate limiter, off by default as on a real server: ``limit_rate(per_sec,
  max_burst)`` turns on the GCRA of ``server/channels/app/ratelimit.go`` (throttled: a burst
  of ``max_burst + 1`` at once, then ``per_sec``) over every REST request of one client
  address; ``limited`` counts the requests it refused.
* A recorder of every REST request and websocket client action.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import ssl
import string
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

JSON = "application/json"
MAX_RUNES = 16383
PENDING_TTL = 30.0


def new_id() -> str:
    """26 lower-case base32-ish characters, like Mattermost's ids."""
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=26))


@dataclass
class User:
    id: str
    username: str
    token: str | None = None
    is_bot: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "create_at": 1682311000000,
            "update_at": 1682311000000,
            "delete_at": 0,
            "username": self.username,
            "auth_data": "",
            "auth_service": "",
            "email": f"{self.username}@example.com",
            "nickname": "",
            "first_name": "",
            "last_name": "",
            "position": "",
            "roles": "system_user",
            "locale": "en",
            "is_bot": self.is_bot,
            "bot_description": "a bot" if self.is_bot else "",
        }


@dataclass
class Channel:
    id: str
    team_id: str
    type: str
    name: str
    display_name: str
    members: set[str]
    last_post_at: int = 0
    delete_at: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "create_at": 1682311000000,
            "update_at": 1682311000000,
            "delete_at": self.delete_at,
            "team_id": self.team_id,
            "type": self.type,
            "display_name": self.display_name,
            "name": self.name,
            "header": "",
            "purpose": "",
            "last_post_at": self.last_post_at,
            "last_root_post_at": self.last_post_at,
            "total_msg_count": 0,
            "creator_id": "",
        }


@dataclass
class Fault:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # for delay_response: the request is processed, the answer is late


def _limit_exceeded(retry_after: int, *, limit: int) -> Fault:
    """The rate limiter's 429 (server/channels/app/ratelimit.go): plain text, with
    ``Retry-After`` and the ``X-RateLimit-*`` headers."""
    return Fault(
        status=429,
        body="limit exceeded\n",
        headers={
            "Retry-After": str(retry_after),
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": str(retry_after),
        },
    )


#: the request's bytes as read by the route wrapper (a file upload's body)
RAW_BODY = web.RequestKey("raw_body", bytes)


@dataclass
class UploadedFile:
    id: str
    channel_id: str
    name: str
    data: bytes
    user_id: str
    #: the post that carries it (a file is attached to one post)
    post_id: str | None = None


@dataclass
class RecordedRequest:
    method: str
    path: str
    route: str
    headers: dict[str, str]
    query: dict[str, str]
    body: Any


@dataclass
class EphemeralPost:
    """What ``SendEphemeralPost`` shows one user (an integration's ``ephemeral_text``)."""

    user_id: str
    channel_id: str
    root_id: str
    message: str


@dataclass(eq=False)  # hashed by identity: kept in a set
class Connection:
    ws: web.WebSocketResponse
    request: web.Request
    user: User | None = None
    seq: int = 0
    connection_id: str = field(default_factory=new_id)


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    # Exactly "application/json": mattermostdriver (and others) check it verbatim.
    return web.Response(
        body=json.dumps(data).encode(), status=status, content_type=JSON, headers=headers
    )


def _post_list(posts: dict[str, dict[str, Any]], *, order: list[dict[str, Any]]) -> web.Response:
    """A ``PostList`` answer: ``order`` newest first, ``posts`` by id (roots included)."""
    ordered = sorted(order, key=lambda p: p["create_at"], reverse=True)
    return _json(
        {
            "order": [p["id"] for p in ordered],
            "posts": posts,
            "next_post_id": "",
            "prev_post_id": "",
            "has_next": False,
        }
    )


def _query_int(request: web.Request, name: str, default: int) -> int:
    try:
        value = int(request.query.get(name, ""))
    except ValueError:
        return default
    return value if value >= 0 else default


def _error(status: int, error_id: str, message: str, where: str = "") -> web.Response:
    return _json(
        {
            "id": error_id,
            "message": message,
            "detailed_error": "",
            "request_id": new_id(),
            "status_code": status,
            "is_oauth": False,
            "where": where,
        },
        status=status,
    )


class FakeMattermost:
    """Start with ``await fake.start()`` (or ``async with``); ``fake.url`` is MATTERMOST_URL."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        header_auth: bool = True,
        host: str = "127.0.0.1",
        url_host: str | None = None,
    ) -> None:
        self._ssl = ssl_context
        #: False simulates a proxy that strips Authorization from the websocket upgrade
        self.header_auth = header_auth
        self._host = host
        self._url_host = url_host or host
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._clock = 0
        self.users: dict[str, User] = {}
        self.channels: dict[str, Channel] = {}
        self.posts: dict[str, dict[str, Any]] = {}
        #: post edits (PUT .../patch and user-side edits): (post id, channel, root id, text)
        self.edits: list[tuple[str, str, str, str]] = []
        #: posts deleted through the API (DELETE /posts/{id})
        self.deleted: list[str] = []
        self.files: dict[str, UploadedFile] = {}
        #: files attached to posts (mime type, bytes), served at /api/v4/files/{id}
        self.shared_files: dict[str, tuple[str, bytes]] = {}
        self.file_downloads: list[str] = []
        self._pending: dict[str, tuple[str, float]] = {}
        self._faults: dict[str, deque[Fault]] = {}
        self.requests: list[RecordedRequest] = []
        #: the rate limiter (``limit_rate``): emission interval, tolerance, TAT
        self._limiter: tuple[float, float] | None = None
        self._tat = 0.0
        self.limited = 0
        self.ws_actions: list[dict[str, Any]] = []
        self._conns: set[Connection] = set()
        self.connections_total = 0
        self.handshakes_refused = 0
        #: while set, every websocket handshake is refused with this status (a gap)
        self.refuse_websockets: int | None = None
        #: integration answers shown to one user only (interactive buttons)
        self.ephemeral: list[EphemeralPost] = []
        #: every integration request the server made for a button press: (url, body, status)
        self.action_requests: list[tuple[str, dict[str, Any], int]] = []
        #: GetPostsSince answers at most this many posts (the server's 1000; tests lower it)
        self.since_limit = 1000
        #: which of more than ``since_limit`` posts the since form picks: the newest (False)
        #: or the oldest (True); the server's SQL leaves it undefined
        self.since_picks_oldest = False
        #: the page form's largest per_page (the server caps it at 200; tests lower it)
        self.per_page_max = 200

        self.team_id = new_id()
        self.bot = self.add_user("gatewaybot", token="bot-token", is_bot=True)
        self.alice = self.add_user("alice", token="alice-token")
        self.bob = self.add_user("bob", token="bob-token")
        self.other_bot = self.add_user("otherbot", token="other-bot-token", is_bot=True)
        everyone = {self.bot.id, self.alice.id, self.bob.id, self.other_bot.id}
        self.town_square = self.add_channel("town-square", "O", members=everyone)
        self.private = self.add_channel("secret", "P", members=everyone)
        self.dm_alice = self.add_dm(self.alice)
        self.gm = self.add_gm([self.alice, self.bob])

    # --- state set-up ------------------------------------------------------------------------

    def add_user(self, username: str, *, token: str | None = None, is_bot: bool = False) -> User:
        user = User(id=new_id(), username=username, token=token, is_bot=is_bot)
        self.users[user.id] = user
        return user

    def add_channel(
        self, name: str, type_: str = "O", *, members: set[str] | None = None
    ) -> Channel:
        channel = Channel(
            id=new_id(),
            team_id=self.team_id,
            type=type_,
            name=name,
            display_name=name.title(),
            members=set(members or {self.bot.id}),
        )
        self.channels[channel.id] = channel
        return channel

    def add_dm(self, user: User) -> Channel:
        a, b = sorted((self.bot.id, user.id))
        channel = Channel(
            id=new_id(),
            team_id="",
            type="D",
            name=f"{a}__{b}",
            display_name="",
            members={self.bot.id, user.id},
        )
        self.channels[channel.id] = channel
        return channel

    def add_gm(self, users: list[User]) -> Channel:
        members = {self.bot.id, *(u.id for u in users)}
        channel = Channel(
            id=new_id(),
            team_id="",
            type="G",
            name=new_id() + "gm",
            display_name=", ".join(sorted(u.username for u in users)),
            members=members,
        )
        self.channels[channel.id] = channel
        return channel

    def user_by_name(self, username: str) -> User:
        return next(u for u in self.users.values() if u.username == username)

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        scheme = "https" if self._ssl else "http"
        return f"{scheme}://{self._url_host}:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        r = app.router
        r.add_get("/api/v4/users/me", self._route("users_me", self._users_me))
        r.add_get("/api/v4/users/me/teams", self._route("teams", self._teams))
        r.add_get(
            "/api/v4/users/me/teams/{team_id}/channels",
            self._route("team_channels", self._team_channels),
        )
        r.add_get("/api/v4/users/me/channels", self._route("my_channels", self._my_channels))
        r.add_get("/api/v4/channels/{channel_id}", self._route("channel", self._channel))
        r.add_get(
            "/api/v4/channels/{channel_id}/posts", self._route("posts_since", self._posts_since)
        )
        r.add_post("/api/v4/posts", self._route("create_post", self._create_post))
        r.add_post("/api/v4/files", self._route("upload_file", self._upload_file))
        r.add_put("/api/v4/posts/{post_id}/patch", self._route("patch_post", self._patch_post))
        r.add_delete("/api/v4/posts/{post_id}", self._route("delete_post", self._delete_post))
        r.add_get("/api/v4/websocket", self._websocket)
        r.add_get("/api/v4/files/{file_id}", self._route("file", self._file))
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self._host, 0))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock, ssl_context=self._ssl)
        await site.start()

    async def close(self) -> None:
        for conn in list(self._conns):
            await conn.ws.close(code=1001)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeMattermost:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- faults ------------------------------------------------------------------------------

    def fail_next(
        self,
        route: str,
        status: int,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        count: int = 1,
    ) -> None:
        """The next ``count`` calls of ``route`` answer ``status`` with ``body`` (a dict is
        sent as JSON, a str as text/plain). Routes: users_me, teams, team_channels,
        my_channels, channel, posts_since, create_post, websocket."""
        for _ in range(count):
            self._faults.setdefault(route, deque()).append(
                Fault(status=status, body=body, headers=dict(headers or {}))
            )

    def rate_limit_next(
        self, route: str = "create_post", *, retry_after: int = 1, count: int = 1
    ) -> None:
        """The real limiter's answer (server/channels/app/ratelimit.go): plain text."""
        limited = _limit_exceeded(retry_after, limit=10)
        self.fail_next(route, 429, body=limited.body, headers=limited.headers, count=count)

    def limit_rate(self, per_sec: float = 10.0, max_burst: int = 100) -> None:
        """Turn on the server's limiter (``RateLimitSettings``, defaults as the server's)."""
        emission = 1.0 / per_sec
        self._limiter = (emission, emission * (max_burst + 1))
        self._tat = 0.0

    def _rate_limited(self) -> web.Response | None:
        """throttled's GCRA, as the real server runs it for each request."""
        if self._limiter is None:
            return None
        emission, tolerance = self._limiter
        now = time.monotonic()
        tat = max(self._tat, now) + emission
        allow_at = tat - tolerance
        if now < allow_at:
            self.limited += 1
            retry = max(1, int(allow_at - now + 0.999))
            return self._fault_response(_limit_exceeded(retry, limit=round(1 / emission)))
        self._tat = tat
        return None

    def delay_response_next(self, route: str, seconds: float) -> None:
        """Process the next ``route`` call normally but answer only after ``seconds``
        (a client timeout then leaves it ambiguous whether the call took effect)."""
        self._faults.setdefault(route, deque()).append(Fault(status=0, delay=seconds))

    # --- user-side API -------------------------------------------------------------------------

    async def user_posts(
        self,
        channel: Channel | str,
        text: str,
        *,
        user: User | str = "alice",
        root_id: str = "",
        mention_bot: bool = False,
        props: dict[str, Any] | None = None,
        post_type: str = "",
        files: list[tuple[str, bytes, str]] | None = None,
    ) -> dict[str, Any]:
        """A person (or another bot) posts; connected websockets receive ``posted``.
        ``files``: ``(name, content, mime type)`` attached to the post (``file_ids`` and
        ``metadata.files``), downloadable at ``/api/v4/files/{id}``."""
        ch = channel if isinstance(channel, Channel) else self.channels[channel]
        author = user if isinstance(user, User) else self.user_by_name(user)
        if mention_bot:
            text = f"@{self.bot.username} {text}"
        error = self._validate_root(ch.id, root_id)
        if error is not None:
            raise ValueError(f"invalid root for a user post: {error[1]}")
        post = self._store_post(
            ch,
            author,
            text,
            root_id=root_id,
            props=props or {},
            pending_post_id=f"{author.id}:{self._now()}",
            post_type=post_type,
        )
        if files:
            infos = []
            for name, content, mime in files:
                file_id = new_id()
                self.shared_files[file_id] = (mime, content)
                infos.append({"id": file_id, "name": name, "mime_type": mime, "size": len(content)})
            post["file_ids"] = [f["id"] for f in infos]
            post["metadata"] = {"files": infos}
        await self._broadcast_posted(ch, post)
        return post

    async def replay_posted(self, post_id: str) -> None:
        """Deliver the ``posted`` event of an existing post again (a duplicate delivery)."""
        post = self.posts[post_id]
        await self._broadcast_posted(self.channels[post["channel_id"]], post)

    async def react(
        self, post_id: str, emoji: str, *, user: User | str = "alice", removed: bool = False
    ) -> None:
        """``reaction_added`` (or ``_removed``) with ``data.reaction`` as a JSON string."""
        post = self.posts[post_id]
        author = user if isinstance(user, User) else self.user_by_name(user)
        now = self._now()
        reaction = {
            "user_id": author.id,
            "post_id": post_id,
            "emoji_name": emoji,
            "create_at": now,
            "update_at": now,
            "delete_at": now if removed else 0,
            "remote_id": "",
            "channel_id": post["channel_id"],
        }
        await self._broadcast(
            self.channels[post["channel_id"]],
            "reaction_removed" if removed else "reaction_added",
            {"reaction": json.dumps(reaction)},
        )

    async def press_button(
        self, post_id: str, action_id: str, *, user: User | str = "alice"
    ) -> tuple[int, dict[str, Any]]:
        """A person presses an interactive button (``props.attachments[].actions[]``) as the
        server relays it (``app/integration_action.go``, ``DoPostActionWithCookie``): a JSON
        ``PostActionIntegrationRequest`` POSTed to the action's integration URL, with the
        presser's ``user_id``, the post's channel and team, and the action's ``context``.
        On a 200 the answer's ``update`` edits the post (its props are kept unless the update
        carries props) and ``ephemeral_text`` is shown to the presser only. Returns the
        integration's status and answer."""
        post = self.posts[post_id]
        presser = user if isinstance(user, User) else self.user_by_name(user)
        channel = self.channels[post["channel_id"]]
        action = next(
            (
                a
                for attachment in post.get("props", {}).get("attachments") or []
                for a in attachment.get("actions") or []
                if a.get("id") == action_id
            ),
            None,
        )
        if action is None or not isinstance(action.get("integration"), dict):
            raise AssertionError(f"post {post_id} has no button {action_id!r}")
        integration = action["integration"]
        body = {
            "user_id": presser.id,
            "user_name": presser.username,
            "channel_id": channel.id,
            "channel_name": channel.name,
            "team_id": channel.team_id,
            "team_name": "team" if channel.team_id else "",
            "post_id": post_id,
            "trigger_id": new_id(),
            "type": action.get("type", ""),
            "data_source": action.get("data_source", ""),
            "context": integration.get("context"),
        }
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                integration["url"],
                json=body,
                headers={"Accept": "application/json"},
            ) as resp,
        ):
            status = resp.status
            text = await resp.text()
        self.action_requests.append((integration["url"], body, status))
        answer = json.loads(text) if text else {}
        if status != 200:
            return status, answer if isinstance(answer, dict) else {}
        update = answer.get("update") if isinstance(answer, dict) else None
        if isinstance(update, dict):
            if isinstance(update.get("props"), dict):
                post["props"] = dict(update["props"])
            if isinstance(update.get("message"), str):
                await self.edit_post(post_id, update["message"])
        ephemeral = answer.get("ephemeral_text") if isinstance(answer, dict) else None
        if isinstance(ephemeral, str) and ephemeral:
            self.ephemeral.append(
                EphemeralPost(
                    user_id=presser.id,
                    channel_id=channel.id,
                    root_id=post.get("root_id") or post_id,
                    message=ephemeral,
                )
            )
        return status, answer

    async def edit_post(self, post_id: str, text: str) -> dict[str, Any]:
        post = self.posts[post_id]
        self.edits.append((post_id, post["channel_id"], post.get("root_id") or "", text))
        now = self._now()
        post.update(message=text, edit_at=now, update_at=now)
        await self._broadcast(
            self.channels[post["channel_id"]], "post_edited", {"post": json.dumps(post)}
        )
        return post

    async def delete_post(self, post_id: str) -> dict[str, Any]:
        post = self.posts[post_id]
        now = self._now()
        post.update(delete_at=now, update_at=now)
        await self._broadcast(
            self.channels[post["channel_id"]],
            "post_deleted",
            {"post": json.dumps(post), "delete_by": post["user_id"]},
        )
        return post

    async def push(
        self, event: str, data: dict[str, Any], *, channel: Channel | None = None
    ) -> None:
        """Send any event to every authenticated connection (or the channel's members)."""
        for conn in list(self._conns):
            if conn.user is None:
                continue
            if channel is not None and conn.user.id not in channel.members:
                continue
            await self._send_event(
                conn, event, dict(data), channel_id=channel.id if channel else ""
            )

    async def push_raw(self, text: str) -> None:
        for conn in list(self._conns):
            if conn.user is not None:
                await conn.ws.send_str(text)

    async def drop_connections(self, code: int = 1000) -> None:
        """Server-initiated close: 1000 with a close frame, 1006 by aborting the TCP
        connection (no close frame at all)."""
        for conn in list(self._conns):
            if code == 1006:
                transport = conn.request.transport
                if transport is not None:
                    transport.abort()
            else:
                await conn.ws.close(code=code, message=b"server going away")
            self._conns.discard(conn)

    @property
    def live_connections(self) -> int:
        return sum(1 for c in self._conns if c.user is not None and not c.ws.closed)

    def posts_in(
        self, channel: Channel | str, *, root_id: str | None = None, by: User | None = None
    ) -> list[dict[str, Any]]:
        """Posts of a channel in creation order; ``root_id=""`` only top-level posts,
        ``root_id=X`` only replies in thread X."""
        cid = channel.id if isinstance(channel, Channel) else channel
        out = [p for p in self.posts.values() if p["channel_id"] == cid and not p["delete_at"]]
        if root_id is not None:
            out = [p for p in out if p["root_id"] == root_id]
        if by is not None:
            out = [p for p in out if p["user_id"] == by.id]
        return sorted(out, key=lambda p: (p["create_at"], p["id"]))

    def bot_posts(self) -> list[dict[str, Any]]:
        return sorted(
            (p for p in self.posts.values() if p["user_id"] == self.bot.id),
            key=lambda p: (p["create_at"], p["id"]),
        )

    def requests_to(self, route: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.route == route]

    # --- internals: state ------------------------------------------------------------------------

    def _now(self) -> int:
        # milliseconds, strictly increasing so order is deterministic
        self._clock = max(self._clock + 1, int(time.time() * 1000))
        return self._clock

    def _validate_root(self, channel_id: str, root_id: str) -> tuple[int, str] | None:
        if not root_id:
            return None
        root = self.posts.get(root_id)
        if root is None or root["delete_at"]:
            return 400, "api.post.create_post.root_id.app_error"
        if root["channel_id"] != channel_id:
            return 500, "api.post.create_post.channel_root_id.app_error"
        if root["root_id"]:
            return 400, "api.post.create_post.root_id.app_error"
        return None

    def _store_post(
        self,
        channel: Channel,
        author: User,
        message: str,
        *,
        root_id: str,
        props: dict[str, Any],
        pending_post_id: str,
        post_type: str = "",
    ) -> dict[str, Any]:
        now = self._now()
        props = dict(props)
        if author.is_bot:
            props["from_bot"] = "true"
        post: dict[str, Any] = {
            "id": new_id(),
            "create_at": now,
            "update_at": now,
            "edit_at": 0,
            "delete_at": 0,
            "is_pinned": False,
            "user_id": author.id,
            "channel_id": channel.id,
            "root_id": root_id,
            "parent_id": "",
            "original_id": "",
            "message": message,
            "type": post_type,
            "props": props,
            "hashtags": "",
            "pending_post_id": pending_post_id,
            "reply_count": 0,
            "metadata": {},
        }
        self.posts[post["id"]] = post
        channel.last_post_at = now
        if root_id:
            root = self.posts[root_id]
            # replies bump the root's UpdateAt and counts (so since-queries return it too)
            root["update_at"] = now
            root["reply_count"] = root.get("reply_count", 0) + 1
            post["reply_count"] = root["reply_count"]
        return post

    def _mentions(self, channel: Channel, post: dict[str, Any]) -> set[str]:
        mentioned: set[str] = set()
        text = post["message"]
        for uid in channel.members:
            name = self.users[uid].username
            if re.search(
                rf"(?<![\w@.\-])@{re.escape(name)}(?![\w\-]|\.[\w\-])", text, re.IGNORECASE
            ):
                mentioned.add(uid)
        if channel.type == "D":
            # a DM notifies the other member as a mention (server notification.go)
            mentioned |= channel.members - {post["user_id"]}
        mentioned.discard(post["user_id"])
        return mentioned

    # --- internals: websocket --------------------------------------------------------------------

    async def _broadcast_posted(self, channel: Channel, post: dict[str, Any]) -> None:
        author = self.users[post["user_id"]]
        data = {
            "channel_display_name": channel.display_name,
            "channel_name": channel.name,
            "channel_type": channel.type,
            "post": json.dumps(post),
            "sender_name": f"@{author.username}",
            "set_online": True,
            "team_id": channel.team_id,
        }
        mentioned = self._mentions(channel, post)
        for conn in list(self._conns):
            if conn.user is None or conn.user.id not in channel.members:
                continue
            per_recipient = dict(data)
            if conn.user.id in mentioned:
                # per-recipient and stringified (server web_broadcast_hooks.go)
                per_recipient["mentions"] = json.dumps([conn.user.id])
            await self._send_event(conn, "posted", per_recipient, channel_id=channel.id)

    async def _broadcast(self, channel: Channel, event: str, data: dict[str, Any]) -> None:
        for conn in list(self._conns):
            if conn.user is not None and conn.user.id in channel.members:
                await self._send_event(conn, event, dict(data), channel_id=channel.id)

    async def _send_event(
        self, conn: Connection, event: str, data: dict[str, Any], *, channel_id: str = ""
    ) -> None:
        frame = {
            "event": event,
            "data": data,
            "broadcast": {
                "omit_users": None,
                "user_id": "",
                "channel_id": channel_id,
                "team_id": "",
            },
            "seq": conn.seq,
        }
        conn.seq += 1
        if conn.ws.closed:
            return
        try:
            await conn.ws.send_str(json.dumps(frame))
        except ConnectionError:
            self._conns.discard(conn)

    async def _register(self, conn: Connection) -> None:
        assert conn.user is not None
        frame = {
            "event": "hello",
            "data": {
                "connection_id": conn.connection_id,
                "server_version": "10.5.0.10.5.0.fake.false",
            },
            "broadcast": {
                "omit_users": None,
                "user_id": conn.user.id,
                "channel_id": "",
                "team_id": "",
                "connection_id": "",
                "omit_connection_id": "",
            },
            "seq": conn.seq,
        }
        conn.seq += 1
        await conn.ws.send_str(json.dumps(frame))

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        fault = self._take_fault("websocket")
        if fault is None and self.refuse_websockets is not None:
            fault = Fault(status=self.refuse_websockets)
        if fault is not None:
            self.handshakes_refused += 1
            return self._fault_response(fault)
        user: User | None = None
        auth = request.headers.get("Authorization", "")
        if self.header_auth and auth:
            user = self._user_for(auth)
            if user is None:
                self.handshakes_refused += 1
                return _error(
                    401,
                    "api.context.session_expired.app_error",
                    "Invalid or expired session, please login again.",
                )
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        conn = Connection(ws=ws, request=request, user=user)
        self._conns.add(conn)
        self.connections_total += 1
        try:
            if user is not None:
                await self._register(conn)
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                try:
                    req = json.loads(msg.data)
                except ValueError:
                    continue
                self.ws_actions.append(req)
                action, seq = req.get("action"), req.get("seq")
                if action == "authentication_challenge":
                    if conn.user is not None:
                        continue  # the real router ignores it on an authenticated socket
                    token = (req.get("data") or {}).get("token", "")
                    conn.user = self._user_for(f"Bearer {token}")
                    if conn.user is None:
                        await ws.close()  # what the real server does on a bad token
                        break
                    # hello goes out before the OK (mattermost#23710)
                    await self._register(conn)
                    await ws.send_str(json.dumps({"status": "OK", "seq_reply": seq}))
                elif conn.user is None:
                    await ws.send_str(
                        json.dumps(
                            {
                                "status": "FAIL",
                                "seq_reply": seq,
                                "error": {
                                    "id": "api.web_socket_router.not_authenticated.app_error",
                                    "message": "not authenticated",
                                },
                            }
                        )
                    )
                else:
                    await ws.send_str(json.dumps({"status": "OK", "seq_reply": seq}))
        finally:
            self._conns.discard(conn)
        return ws

    # --- internals: REST -------------------------------------------------------------------------

    def _user_for(self, authorization: str) -> User | None:
        if not authorization.startswith("Bearer "):
            return None
        token = authorization[len("Bearer ") :].strip()
        return next((u for u in self.users.values() if token and u.token == token), None)

    def _take_fault(self, route: str) -> Fault | None:
        queue = self._faults.get(route)
        if queue:
            return queue.popleft()
        return None

    @staticmethod
    def _fault_response(fault: Fault) -> web.Response:
        if isinstance(fault.body, str):
            return web.Response(text=fault.body, status=fault.status, headers=fault.headers)
        body = (
            fault.body
            if fault.body is not None
            else {
                "id": f"fake.fault.{fault.status}",
                "message": "injected fault",
                "status_code": fault.status,
            }
        )
        return _json(body, status=fault.status, headers=fault.headers)

    async def _file(self, request: web.Request, user: User, body: Any) -> web.Response:
        found = self.shared_files.get(request.match_info["file_id"])
        if found is None:
            return web.json_response({"id": "app.file.get.app_error"}, status=404)
        self.file_downloads.append(request.match_info["file_id"])
        return web.Response(body=found[1], content_type=found[0])

    def _route(
        self, name: str, handler: Callable[[web.Request, User, Any], Awaitable[web.Response]]
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def wrapped(request: web.Request) -> web.Response:
            body: Any = None
            if request.can_read_body:
                raw = await request.read()
                request[RAW_BODY] = raw
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
            self.requests.append(
                RecordedRequest(
                    method=request.method,
                    path=request.path,
                    route=name,
                    headers=dict(request.headers),
                    query=dict(request.query),
                    body=body,
                )
            )
            limited = self._rate_limited()
            if limited is not None:
                return limited
            fault = self._take_fault(name)
            delay = 0.0
            if fault is not None:
                if fault.delay:
                    delay = fault.delay
                else:
                    return self._fault_response(fault)
            user = self._user_for(request.headers.get("Authorization", ""))
            if user is None:
                return _error(
                    401,
                    "api.context.session_expired.app_error",
                    "Invalid or expired session, please login again.",
                )
            response = await handler(request, user, body)
            if delay:
                await asyncio.sleep(delay)
            return response

        return wrapped

    async def _users_me(self, request: web.Request, user: User, body: Any) -> web.Response:
        return _json(user.to_json())

    async def _teams(self, request: web.Request, user: User, body: Any) -> web.Response:
        return _json(
            [
                {
                    "id": self.team_id,
                    "name": "team",
                    "display_name": "Team",
                    "type": "O",
                    "delete_at": 0,
                }
            ]
        )

    def _member_channels(self, user: User) -> list[Channel]:
        return [c for c in self.channels.values() if user.id in c.members]

    async def _team_channels(self, request: web.Request, user: User, body: Any) -> web.Response:
        team = request.match_info["team_id"]
        if team != self.team_id:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        return _json([c.to_json() for c in self._member_channels(user) if c.team_id in (team, "")])

    async def _my_channels(self, request: web.Request, user: User, body: Any) -> web.Response:
        return _json([c.to_json() for c in self._member_channels(user)])

    async def _channel(self, request: web.Request, user: User, body: Any) -> web.Response:
        channel = self.channels.get(request.match_info["channel_id"])
        if channel is None:
            return _error(
                404, "app.channel.get.existing.app_error", "Unable to find the existing channel."
            )
        if user.id not in channel.members:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        return _json(channel.to_json())

    async def _posts_since(self, request: web.Request, user: User, body: Any) -> web.Response:
        """``GET channels/{id}/posts`` in its two forms (route name ``posts_since``): with
        ``since`` > 0 the server's GetPostsSince, else the page form (GetPostsPage)."""
        channel = self.channels.get(request.match_info["channel_id"])
        if channel is None or user.id not in channel.members:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            return _error(
                400,
                "api.context.invalid_url_param.app_error",
                "Invalid or missing since parameter in request URL.",
            )
        if since <= 0:
            return self._posts_page(channel, request)
        # server GetPostsSince: UpdateAt > since (deleted ones included), at most 1000 in an
        # order SQL does not define (LIMIT without ORDER BY), plus the roots of their threads
        hits = sorted(
            (
                p
                for p in self.posts.values()
                if p["channel_id"] == channel.id and p["update_at"] > since
            ),
            key=lambda p: p["create_at"],
            reverse=not self.since_picks_oldest,
        )[: self.since_limit]
        selected = self._with_roots(hits)
        return _post_list(selected, order=list(selected.values()))

    def _posts_page(self, channel: Channel, request: web.Request) -> web.Response:
        """GetPostsPage: ``page``/``per_page`` (default 0/60, at most ``per_page_max``; a bad
        value falls back to the default, as the server's param parser does), not deleted,
        newest first by create_at; ``order`` is the page, ``posts`` adds the roots of its
        replies."""
        page = _query_int(request, "page", 0)
        per_page = min(_query_int(request, "per_page", 60), self.per_page_max)
        listed = sorted(
            (
                p
                for p in self.posts.values()
                if p["channel_id"] == channel.id and not p["delete_at"]
            ),
            key=lambda p: p["create_at"],
            reverse=True,
        )[page * per_page : (page + 1) * per_page]
        return _post_list(self._with_roots(listed), order=listed)

    def _with_roots(self, posts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        selected = {p["id"]: p for p in posts}
        for p in posts:
            if p["root_id"] and p["root_id"] in self.posts:
                selected.setdefault(p["root_id"], self.posts[p["root_id"]])
        return selected

    async def _upload_file(self, request: web.Request, user: User, body: Any) -> web.Response:
        """The non-multipart upload: channel_id and filename in the query, bytes as body."""
        channel = self.channels.get(request.query.get("channel_id", ""))
        if channel is None or user.id not in channel.members:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        filename = request.query.get("filename", "")
        data = request.get(RAW_BODY, b"")
        if not filename or not data:
            return _error(
                400, "api.file.upload_file.incorrect_number_of_files.app_error", "Bad upload."
            )
        file_id = f"file{len(self.files) + 1:022d}"
        self.files[file_id] = UploadedFile(
            id=file_id, channel_id=channel.id, name=filename, data=data, user_id=user.id
        )
        info = {"id": file_id, "name": filename, "size": len(data), "channel_id": channel.id}
        return _json({"file_infos": [info], "client_ids": []}, status=201)

    async def _patch_post(self, request: web.Request, user: User, body: Any) -> web.Response:
        """PUT /posts/{id}/patch: only the author may edit; ``message`` replaces the text."""
        post = self.posts.get(request.match_info["post_id"])
        if post is None or post.get("delete_at"):
            return _error(404, "app.post.get.app_error", "Unable to get the post.")
        if post["user_id"] != user.id:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        if isinstance(body, dict) and isinstance(body.get("props"), dict):
            # PatchPost replaces the props; from_bot is the server's own mark, kept
            props = dict(body["props"])
            if post["props"].get("from_bot"):
                props["from_bot"] = post["props"]["from_bot"]
            post["props"] = props
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            await self.edit_post(post["id"], body["message"])
        return _json(post)

    async def _delete_post(self, request: web.Request, user: User, body: Any) -> web.Response:
        """DELETE /posts/{id}: the author (or an admin) removes it."""
        post = self.posts.get(request.match_info["post_id"])
        if post is None or post.get("delete_at"):
            return _error(404, "app.post.get.app_error", "Unable to get the post.")
        if post["user_id"] != user.id:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        await self.delete_post(post["id"])
        self.deleted.append(post["id"])
        return _json({"status": "OK"})

    async def _create_post(self, request: web.Request, user: User, body: Any) -> web.Response:
        if not isinstance(body, dict):
            return _error(
                400,
                "api.context.invalid_body_param.app_error",
                "Invalid or missing post in request body.",
            )
        channel = self.channels.get(str(body.get("channel_id", "")))
        if channel is None or user.id not in channel.members:
            return _error(
                403,
                "api.context.permissions.app_error",
                "You do not have the appropriate permissions.",
            )
        message = body.get("message", "")
        if not isinstance(message, str) or len(message) > MAX_RUNES:
            return _error(
                400, "model.post.is_valid.msg.app_error", "Invalid Message.", "Post.IsValid"
            )
        pending = body.get("pending_post_id") or ""
        now = time.monotonic()
        for key in [k for k, (_, expires) in self._pending.items() if expires <= now]:
            del self._pending[key]
        if pending:
            # deduplicateCreatePost: same pending_post_id within 30 s -> the same post
            seen = self._pending.get(pending)
            if seen is not None and seen[1] > now:
                post_id = seen[0]
                if not post_id:
                    return _error(
                        500,
                        "api.post.deduplicate_create_post.pending",
                        "Post rejected: a post with this pending id is being created.",
                    )
                return _json(self.posts[post_id], status=201)
            self._pending[pending] = ("", now + PENDING_TTL)
        root_id = str(body.get("root_id") or "")
        error = self._validate_root(channel.id, root_id)
        if error is not None:
            self._pending.pop(pending, None)
            return _error(error[0], error[1], "Invalid RootId parameter.", "createPost")
        file_ids = body.get("file_ids") or []
        if not isinstance(file_ids, list) or any(
            not isinstance(f, str)
            or f not in self.files
            or self.files[f].channel_id != channel.id
            or self.files[f].post_id is not None
            for f in file_ids
        ):
            self._pending.pop(pending, None)
            return _error(400, "api.post.create_post.file_ids.app_error", "Invalid file_ids.")
        if not message and not file_ids:
            self._pending.pop(pending, None)
            return _error(
                400, "model.post.is_valid.msg.app_error", "Invalid Message.", "Post.IsValid"
            )
        raw_props = body.get("props")
        props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
        post = self._store_post(
            channel, user, message, root_id=root_id, props=props, pending_post_id=pending
        )
        if file_ids:
            post["file_ids"] = list(file_ids)
            for f in file_ids:
                self.files[f].post_id = post["id"]
        if pending:
            self._pending[pending] = (post["id"], now + PENDING_TTL)
        await self._broadcast_posted(channel, post)
        return _json(post, status=201)
