"""A fake Bot Framework for Microsoft Teams, as real local servers on 127.0.0.1:<ephemeral>.

Three services behind one aiohttp server, speaking the wire protocol the real ones speak
(platforms.md §9):

* an **OpenID issuer**: ``GET /openid/.well-known/openidconfiguration`` (``issuer``,
  ``jwks_uri``) and ``GET /openid/keys`` (RSA JWKs with ``kid`` and ``endorsements``). Its
  signing keys rotate (``rotate_keys``); every activity it sends to the gateway carries
  ``Authorization: Bearer <JWT>`` signed with the current key: issuer
  ``https://api.botframework.com``, audience the app id, ``serviceurl`` the connector's URL.
  ``token(...)`` makes forged ones (another key, audience, expiry, kid or serviceUrl).
* a **token endpoint**: ``POST /token`` (client credentials; the app id and secret checked,
  ``invalid_client`` otherwise), tokens good for ``token_lifetime`` seconds.
* a **Bot Connector**: ``POST /connector/v3/conversations/{id}/activities`` (a new message:
  ``{id}`` with ``;messageid=<root>`` lands in that root's reply chain, a channel id without
  it lands at the top of the channel, where a thread-exact bot never posts), ``POST
  …/activities/{replyToId}``, ``PUT …/activities/{id}`` (update), ``DELETE …/activities/{id}``,
  ``GET /connector/v3/conversations/{id}/members``. Each call needs a token the token endpoint
  issued (401 otherwise). Faults: ``rate_limit_next`` (429 with ``Retry-After``),
  ``fail_next``, ``delay_next``.

A state model (channels with their reply chains, chats, every message) lets tests read where
each of the bot's messages landed. People post with ``user_posts``; edits, deletions, card
presses and reactions are sent as the activities Teams sends (``messageUpdate``,
``messageDelete``, ``invoke`` ``adaptiveCard/action``, ``messageReaction``)."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

APP_ID = "6f1c2a3b-0000-4000-8000-00000000b07a"
APP_PASSWORD = "fake-teams-client-secret"
TENANT = "9e1d0c4b-0000-4000-8000-0000000007e5"
BOT_NAME = "Gateway"
ISSUER = "https://api.botframework.com"
CARD = "application/vnd.microsoft.card.adaptive"


@dataclass(frozen=True)
class Person:
    id: str
    name: str
    aad: str

    def account(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "aadObjectId": self.aad}


ANN = Person("29:1ann-teams-id", "Ann", "aad-ann-0001")
BOB = Person("29:1bob-teams-id", "Bob", "aad-bob-0002")


@dataclass
class Place:
    """A team channel (``kind="channel"``), a 1:1 chat (``personal``) or a group chat."""

    id: str
    name: str
    kind: str


@dataclass
class Message:
    """One message the fake knows, by a person or by the bot."""

    id: str
    place: str
    #: the reply chain it is in (a channel), ``None`` in a chat; a root is its own root
    root: str | None
    text: str
    by_bot: bool
    attachments: list[dict[str, Any]] = field(default_factory=list)
    channel_data: dict[str, Any] = field(default_factory=dict)
    deleted: bool = False
    #: the conversation id the bot used (the tests check threads with it)
    conversation: str = ""


@dataclass
class Delivery:
    """One activity the fake sent to the gateway, and the answer."""

    activity: dict[str, Any]
    status: int
    body: str

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class _Key:
    kid: str
    private: rsa.RSAPrivateKey


def _new_key() -> _Key:
    return _Key(
        kid=uuid.uuid4().hex[:16],
        private=rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


class FakeTeams:
    def __init__(
        self,
        *,
        app_id: str = APP_ID,
        app_password: str = APP_PASSWORD,
        tenant: str = TENANT,
        token_lifetime: int = 3600,
    ) -> None:
        self.app_id = app_id
        self.app_password = app_password
        self.tenant = tenant
        self.token_lifetime = token_lifetime
        self.bot_id = f"28:{app_id}"
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(int(time.time() * 1000))
        #: the published signing keys, current last
        self.keys: list[_Key] = [_new_key()]
        self.places: dict[str, Place] = {}
        self.messages: dict[str, Message] = {}
        #: every activity sent to the gateway, with its answer
        self.deliveries: list[Delivery] = []
        #: where activities go (the gateway's ``/teams/messages``)
        self.messages_url = ""
        #: (method, path, monotonic time, status) of every connector call
        self.calls: list[tuple[str, str, float, int]] = []
        #: (message id, text) of every update of a bot message
        self.updates: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        #: the bot's posts at the top of a channel (a reply lost from its thread)
        self.thread_violations: list[Message] = []
        self.token_requests = 0
        self.key_fetches = 0
        self._tokens: set[str] = set()
        self._faults: list[tuple[int, dict[str, str], float]] = []
        self._delay = 0.0
        self.channel = self.add_place("19:general0a1b2c3d4e5f@thread.tacv2", "General", "channel")

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def service_url(self) -> str:
        return f"{self.url}/connector/"

    @property
    def openid_url(self) -> str:
        return f"{self.url}/openid/.well-known/openidconfiguration"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def env(self) -> dict[str, str]:
        """The settings a gateway needs to reach this fake."""
        return {
            "TEAMS_APP_ID": self.app_id,
            "TEAMS_APP_PASSWORD": self.app_password,
            "TEAMS_OPENID_METADATA_URL": self.openid_url,
            "TEAMS_TOKEN_URL": self.token_url,
        }

    async def start(self) -> None:
        app = web.Application()
        r = app.router
        r.add_get("/openid/.well-known/openidconfiguration", self._metadata)
        r.add_get("/openid/keys", self._jwks)
        r.add_post("/token", self._token)
        base = "/connector/v3/conversations/{conversation}"
        r.add_post(f"{base}/activities", self._send)
        r.add_post(f"{base}/activities/{{activity}}", self._send)
        r.add_put(f"{base}/activities/{{activity}}", self._update)
        r.add_delete(f"{base}/activities/{{activity}}", self._delete)
        r.add_get(f"{base}/members", self._members)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTeams:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- places ------------------------------------------------------------------------------

    def add_place(self, place_id: str, name: str, kind: str) -> Place:
        place = Place(place_id, name, kind)
        self.places[place_id] = place
        return place

    def personal_chat(self, person: Person = ANN) -> Place:
        return self.add_place(f"a:1{person.aad}-{uuid.uuid4().hex[:8]}", person.name, "personal")

    def group_chat(self) -> Place:
        return self.add_place(f"19:{uuid.uuid4().hex}@thread.v2", "Group", "groupChat")

    # --- keys and tokens ---------------------------------------------------------------------

    def rotate_keys(self, *, keep_old: bool = False) -> None:
        """A new current signing key; the old ones stop being published unless ``keep_old``."""
        new = _new_key()
        self.keys = [*self.keys, new] if keep_old else [new]

    def token(
        self,
        *,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        service_url: str | None = None,
        **claims: Any,
    ) -> str:
        """A channel token as Bot Framework signs it; each argument forges one part."""
        current = self.keys[-1]
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": ISSUER,
            "aud": self.app_id,
            "nbf": now - 5,
            "exp": now + 3600,
            "serviceurl": service_url if service_url is not None else self.service_url,
        }
        body.update(claims)
        return jwt.encode(
            body,
            key if key is not None else current.private,
            algorithm="RS256",
            headers={"kid": kid if kid is not None else current.kid},
        )

    # --- people's activities -----------------------------------------------------------------

    def _activity(
        self,
        kind: str,
        place: Place,
        *,
        person: Person,
        activity_id: str | None = None,
        root: str | None = None,
    ) -> dict[str, Any]:
        conversation: dict[str, Any] = {
            "id": place.id if root is None else f"{place.id};messageid={root}",
            "conversationType": place.kind,
            "tenantId": self.tenant,
        }
        if place.kind != "personal":
            conversation["isGroup"] = True
        channel_data: dict[str, Any] = {"tenant": {"id": self.tenant}}
        if place.kind == "channel":
            channel_data["teamsChannelId"] = place.id
            channel_data["channel"] = {"id": place.id, "name": place.name}
            channel_data["team"] = {"id": "19:team0@thread.tacv2", "name": "Team"}
        return {
            "type": kind,
            "id": activity_id or str(next(self._ids)),
            "timestamp": _now(),
            "serviceUrl": self.service_url,
            "channelId": "msteams",
            "from": person.account(),
            "recipient": {"id": self.bot_id, "name": BOT_NAME},
            "conversation": conversation,
            "channelData": channel_data,
            "locale": "en-US",
        }

    def user_message(
        self,
        place: Place,
        text: str,
        *,
        person: Person = ANN,
        mention: bool = True,
        thread: str | None = None,
    ) -> dict[str, Any]:
        """A person's message, as the activity Teams will send (``deliver`` sends it): in a
        channel a new post (``thread`` ``None``) or a reply in ``thread``'s chain; in a chat,
        a message there. ``mention``: ``<at>Gateway</at>`` first, with its mention entity."""
        activity_id = str(next(self._ids))
        root = (thread or activity_id) if place.kind == "channel" else None
        activity = self._activity(
            "message", place, person=person, activity_id=activity_id, root=root
        )
        if thread is not None:
            activity["replyToId"] = thread
        at = f"<at>{BOT_NAME}</at>"
        activity["text"] = f"{at} {text}" if mention else text
        activity["textFormat"] = "plain"
        if mention:
            activity["entities"] = [
                {
                    "type": "mention",
                    "mentioned": {"id": self.bot_id, "name": BOT_NAME},
                    "text": at,
                }
            ]
        self.messages[activity_id] = Message(
            id=activity_id, place=place.id, root=root, text=activity["text"], by_bot=False
        )
        return activity

    async def user_posts(
        self,
        place: Place,
        text: str,
        *,
        person: Person = ANN,
        mention: bool = True,
        thread: str | None = None,
    ) -> Delivery:
        """``user_message``, delivered to the gateway."""
        return await self.deliver(
            self.user_message(place, text, person=person, mention=mention, thread=thread)
        )

    async def edits(self, message_id: str, text: str, *, person: Person = ANN) -> Delivery:
        message = self.messages[message_id]
        message.text = text
        activity = self._activity(
            "messageUpdate",
            self.places[message.place],
            person=person,
            activity_id=message_id,
            root=message.root,
        )
        activity["text"] = text
        at = f"<at>{BOT_NAME}</at>"
        if at in text:  # the edited message, whole: its mentions come with it
            activity["entities"] = [
                {"type": "mention", "mentioned": {"id": self.bot_id, "name": BOT_NAME}, "text": at}
            ]
        activity["channelData"]["eventType"] = "editMessage"
        return await self.deliver(activity)

    async def deletes(self, message_id: str, *, person: Person = ANN) -> Delivery:
        message = self.messages[message_id]
        message.deleted = True
        activity = self._activity(
            "messageDelete",
            self.places[message.place],
            person=person,
            activity_id=message_id,
            root=message.root,
        )
        activity["channelData"]["eventType"] = "softDeleteMessage"
        return await self.deliver(activity)

    async def reacts(
        self, message_id: str, reaction: str = "like", *, person: Person = ANN
    ) -> Delivery:
        message = self.messages[message_id]
        activity = self._activity(
            "messageReaction", self.places[message.place], person=person, root=message.root
        )
        activity["replyToId"] = message_id
        activity["reactionsAdded"] = [{"type": reaction}]
        return await self.deliver(activity)

    async def presses(
        self,
        card: Message,
        verb: str,
        *,
        person: Person = ANN,
        place: Place | None = None,
        root: str | None = None,
        reply_to: str | None = None,
    ) -> Delivery:
        """A press of the card's ``Action.Execute`` button with ``verb``: an ``invoke``
        named ``adaptiveCard/action`` whose value carries the button's ``data``. By default
        from the card's own place and thread; ``place``/``root``/``reply_to`` move it."""
        [action] = [
            a
            for att in card.attachments
            if att.get("contentType") == CARD
            for a in att["content"].get("actions", [])
            if a.get("verb") == verb
        ]
        where = place or self.places[card.place]
        activity = self._activity(
            "invoke", where, person=person, root=root if place or root else card.root
        )
        activity["name"] = "adaptiveCard/action"
        activity["replyToId"] = reply_to or card.id
        activity["value"] = {
            "action": {"type": "Action.Execute", "verb": verb, "data": action.get("data", {})},
            "trigger": "manual",
        }
        return await self.deliver(activity)

    async def deliver(
        self,
        activity: dict[str, Any],
        *,
        token: str | None = None,
        authorization: str | None = None,
        url: str | None = None,
    ) -> Delivery:
        """POST one activity to the gateway (``url``, else ``messages_url``), signed
        (``token``: a forged one instead). Raises ``aiohttp.ClientError`` when the gateway
        cannot be reached."""
        url = url or self.messages_url
        assert url, "set messages_url to the gateway's /teams/messages"
        header = authorization if authorization is not None else f"Bearer {token or self.token()}"
        async with aiohttp.ClientSession() as session:
            async with session.post(
                url, json=activity, headers={"Authorization": header}
            ) as response:
                delivery = Delivery(activity, response.status, await response.text())
        self.deliveries.append(delivery)
        return delivery

    # --- what the bot did --------------------------------------------------------------------

    def bot_messages(self, place: Place | None = None, *, root: str | None = None) -> list[Message]:
        """The bot's messages (not deleted), oldest first; in ``place``, in ``root``'s chain."""
        return [
            m
            for m in self.messages.values()
            if m.by_bot
            and not m.deleted
            and (place is None or m.place == place.id)
            and (root is None or m.root == root)
        ]

    def sends(self) -> list[float]:
        """When each new message of the bot arrived (monotonic), typing left out."""
        return [t for method, path, t, status in self.calls if method == "POST" and status == 201]

    # --- faults ------------------------------------------------------------------------------

    def rate_limit_next(self, count: int = 1, *, retry_after: float = 1.0) -> None:
        for _ in range(count):
            self._faults.append((429, {"Retry-After": str(retry_after)}, 0.0))

    def fail_next(self, status: int, count: int = 1) -> None:
        for _ in range(count):
            self._faults.append((status, {}, 0.0))

    def pending_faults(self) -> int:
        return len(self._faults)

    def delay_next(self, seconds: float) -> None:
        self._delay = seconds

    # --- the OpenID issuer and the token endpoint ----------------------------------------------

    async def _metadata(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": ISSUER,
                "authorization_endpoint": f"{self.url}/authorize",
                "jwks_uri": f"{self.url}/openid/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def _jwks(self, request: web.Request) -> web.Response:
        self.key_fetches += 1
        keys = []
        for key in self.keys:
            jwk = RSAAlgorithm.to_jwk(key.private.public_key(), as_dict=True)
            jwk.update({"kid": key.kid, "use": "sig", "endorsements": ["msteams", "webchat"]})
            keys.append(jwk)
        return web.json_response({"keys": keys})

    async def _token(self, request: web.Request) -> web.Response:
        self.token_requests += 1
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if form.get("client_id") != self.app_id or form.get("client_secret") != self.app_password:
            return web.json_response(
                {
                    "error": "invalid_client",
                    "error_description": "AADSTS7000215: Invalid client secret",
                },
                status=401,
            )
        if form.get("scope") != "https://api.botframework.com/.default":
            return web.json_response({"error": "invalid_scope"}, status=400)
        token = f"fake-bf-token-{uuid.uuid4().hex}"
        self._tokens.add(token)
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": self.token_lifetime,
                "ext_expires_in": self.token_lifetime,
                "access_token": token,
            }
        )

    # --- the connector -----------------------------------------------------------------------

    async def _guard(self, request: web.Request) -> web.Response | None:
        if self._delay:
            delay, self._delay = self._delay, 0.0
            await asyncio.sleep(delay)
        authorization = request.headers.get("Authorization", "")
        if authorization.removeprefix("Bearer ") not in self._tokens:
            return web.json_response(
                {"error": {"code": "Unauthorized", "message": "token not valid"}}, status=401
            )
        if self._faults:
            status, headers, _ = self._faults.pop(0)
            return web.json_response(
                {"error": {"code": "TooManyRequests" if status == 429 else "ServiceError"}},
                status=status,
                headers=headers,
            )
        return None

    def _record(self, request: web.Request, status: int) -> None:
        self.calls.append((request.method, request.path, time.monotonic(), status))

    def _where(self, conversation: str) -> tuple[Place | None, str | None]:
        base, _, root = conversation.partition(";messageid=")
        return self.places.get(base), root or None

    async def _send(self, request: web.Request) -> web.Response:
        refused = await self._guard(request)
        if refused is not None:
            self._record(request, refused.status)
            return refused
        body = await request.json()
        if body.get("type") == "typing":
            self._record(request, 200)
            return web.json_response({})
        place, root = self._where(request.match_info["conversation"])
        if place is None:
            self._record(request, 404)
            return web.json_response({"error": {"code": "ConversationNotFound"}}, status=404)
        reply_to = request.match_info.get("activity")
        if place.kind == "channel" and root is None and reply_to is not None:
            replied = self.messages.get(reply_to)
            root = replied.root if replied is not None else None
        if place.kind == "channel" and root is not None and root not in self.messages:
            self._record(request, 404)
            return web.json_response({"error": {"code": "MessageNotFound"}}, status=404)
        message_id = str(next(self._ids))
        message = Message(
            id=message_id,
            place=place.id,
            root=(root or message_id) if place.kind == "channel" else None,
            text=str(body.get("text") or ""),
            by_bot=True,
            attachments=list(body.get("attachments") or []),
            channel_data=dict(body.get("channelData") or {}),
            conversation=request.match_info["conversation"],
        )
        self.messages[message_id] = message
        if place.kind == "channel" and root is None:
            self.thread_violations.append(message)
        self._record(request, 201)
        return web.json_response({"id": message_id}, status=201)

    async def _update(self, request: web.Request) -> web.Response:
        refused = await self._guard(request)
        if refused is not None:
            self._record(request, refused.status)
            return refused
        message = self.messages.get(request.match_info["activity"])
        place, _ = self._where(request.match_info["conversation"])
        if message is None or message.deleted or place is None or message.place != place.id:
            self._record(request, 404)
            return web.json_response({"error": {"code": "MessageNotFound"}}, status=404)
        body = await request.json()
        message.text = str(body.get("text") or "")
        message.attachments = list(body.get("attachments") or [])
        message.channel_data = dict(body.get("channelData") or {})
        self.updates.append((message.id, message.text))
        self._record(request, 200)
        return web.json_response({"id": message.id})

    async def _delete(self, request: web.Request) -> web.Response:
        refused = await self._guard(request)
        if refused is not None:
            self._record(request, refused.status)
            return refused
        message = self.messages.get(request.match_info["activity"])
        if message is None or message.deleted:
            self._record(request, 404)
            return web.json_response({"error": {"code": "MessageNotFound"}}, status=404)
        message.deleted = True
        self.deleted.append(message.id)
        self._record(request, 200)
        return web.Response(status=200)

    async def _members(self, request: web.Request) -> web.Response:
        refused = await self._guard(request)
        if refused is not None:
            return refused
        place, _ = self._where(request.match_info["conversation"])
        if place is None:
            return web.json_response({"error": {"code": "ConversationNotFound"}}, status=404)
        return web.json_response(
            [
                {**p.account(), "userPrincipalName": f"{p.name.lower()}@example.com"}
                for p in (ANN, BOB)
            ]
        )


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
