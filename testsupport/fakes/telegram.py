"""A fake Telegram Bot API server: aiohttp on 127.0.0.1:<ephemeral port>, driven by the real
python-telegram-bot (platforms.md §4.4).

It has three faces:

* the wire API the gateway talks to (``/bot<token>/<method>``): getMe, getUpdates (offset
  confirmation, long poll, redelivery of unconfirmed updates, 409 for a second poller or an
  active webhook), setWebhook/deleteWebhook/getWebhookInfo (with a pusher that POSTs updates
  with the secret header and retries non-2xx), setMyCommands, sendMessage, sendChatAction,
  createForumTopic; query, urlencoded, JSON and multipart bodies; the real envelope and
  error texts;
* a user-side API for tests (``user_says(chat, text, topic=..., reply_to=...)``, edits,
  service messages, channel posts, raw updates) over a state model of chats, forum topics
  (General included), reply chains, private chats, business connections and channel
  direct-messages chats;
* a recorder of every request and a fault scheduler (next N calls to a method -> an error
  status, a 429 with ``retry_after``, a delay, or a dropped connection).

Where the real server's behaviour is documented, the fake follows it (platforms.md §1): General
messages carry no thread fields; replies inside General and in non-forum supergroups carry the
reply chain's root as ``message_thread_id`` without ``is_topic_message``; sending to a thread id
that is not a live topic (a chain root, a deleted topic, and by default General's id 1) fails
with "Bad Request: message thread not found"; a reply lands where the replied message is.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import re
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

DEFAULT_TOKEN = "123456789:TEST-fake-token_for-tests"
MAX_TEXT = 4096
MAX_CAPTION = 1024
#: sendPhoto: "The photo must be at most 10 MB in size"
MAX_PHOTO_BYTES = 10 * 1024 * 1024
#: update types delivered when allowed_updates is empty (Bot API getUpdates)
_NOT_BY_DEFAULT = frozenset({"chat_member", "message_reaction", "message_reaction_count"})
_PATH_RE = re.compile(r"^/bot(?P<token>[^/]+)/(?P<method>[A-Za-z]+)$")
_MENTION_RE = re.compile(r"@[A-Za-z0-9_]{3,64}")
_COMMAND_RE = re.compile(r"^/[A-Za-z0-9_]{1,32}(?:@[A-Za-z0-9_]{3,64})?")

THREAD_NOT_FOUND = "Bad Request: message thread not found"
CHAT_NOT_FOUND = "Bad Request: chat not found"
TOO_LONG = "Bad Request: message is too long"


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class User:
    id: int
    first_name: str
    username: str | None = None
    is_bot: bool = False
    last_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "is_bot": self.is_bot, "first_name": self.first_name}
        if self.last_name:
            out["last_name"] = self.last_name
        if self.username:
            out["username"] = self.username
        return out


@dataclass
class Topic:
    id: int
    name: str
    closed: bool = False
    deleted: bool = False


@dataclass
class Chat:
    id: int
    type: str  # private | group | supergroup | channel
    title: str | None = None
    is_forum: bool = False
    #: private chat with topics enabled (Bot API 9.3)
    topics_enabled: bool = False
    #: channel direct-messages chat (Bot API 9.2)
    is_direct_messages: bool = False
    user: User | None = None
    business_connection_id: str | None = None
    topics: dict[int, Topic] = field(default_factory=dict)
    #: message_id -> the message as the Bot API would send it
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: message_id -> forum topic it lives in (None = General / no topic)
    topic_of: dict[int, int | None] = field(default_factory=dict)
    #: message_id -> root of its reply chain (non-forum groups and General)
    chain_root_of: dict[int, int] = field(default_factory=dict)
    #: direct-messages topic id per user id
    dm_topics: dict[int, int] = field(default_factory=dict)
    #: ids 1.. are taken by the chat's creation and, in forums, General is 1 (platforms.md §1.3)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(10))

    def next_message_id(self) -> int:
        return next(self._ids)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.title is not None:
            out["title"] = self.title
        if self.user is not None and self.type == "private":
            out["first_name"] = self.user.first_name
            if self.user.username:
                out["username"] = self.user.username
        if self.is_forum:
            out["is_forum"] = True
        if self.is_direct_messages:
            out["is_direct_messages"] = True
        return out


@dataclass
class Sent:
    """One message the bot posted, and where it landed."""

    chat_id: int
    message_id: int
    text: str
    #: forum / private-chat topic it landed in (None = General or a chat without topics)
    topic: int | None
    reply_to: int | None
    business_connection_id: str | None
    direct_messages_topic_id: int | None
    params: dict[str, Any]
    #: the ``entities`` the bot sent with the text (validated as the Bot API does)
    entities: list[dict[str, Any]] = field(default_factory=list)
    #: sendPhoto / sendDocument: "photo" or "document" and the uploaded file (text = caption)
    media: str | None = None
    upload: Upload | None = None


@dataclass
class Upload:
    """A file the bot uploaded (multipart ``InputFile``)."""

    filename: str
    content_type: str
    data: bytes


@dataclass
class Recorded:
    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    content_type: str
    body: bytes
    at: float


@dataclass
class Fault:
    status: int | None = None
    description: str = ""
    retry_after: int | None = None
    delay: float = 0.0
    #: close the connection without an answer; ``apply`` = do the call first (the message is
    #: posted but the client never hears so: an ambiguous outcome)
    drop: bool = False
    apply: bool = False


class FakeTelegram:
    def __init__(
        self,
        *,
        token: str = DEFAULT_TOKEN,
        bot_username: str = "GatewayTestBot",
        thread_id_1_is_general: bool = False,
        webhook_retry_delay: float = 0.05,
    ) -> None:
        self.token = token
        self.bot = User(
            id=int(token.split(":")[0]), first_name="Gateway", is_bot=True, username=bot_username
        )
        #: tdlib/telegram-bot-api#798: whether message_thread_id=1 reaches General (unconfirmed
        #: after Bot API 9.3; off = the documented 400 "message thread not found")
        self.thread_id_1_is_general = thread_id_1_is_general
        self.webhook_retry_delay = webhook_retry_delay
        #: BotFather's /setprivacy (on by default for new bots); getMe reports it as
        #: ``can_read_all_group_messages = not privacy_mode``
        self.privacy_mode = True

        self.chats: dict[int, Chat] = {}
        self.business_chats: dict[tuple[str, int], Chat] = {}
        self.business_connections: dict[str, User] = {}
        self.users: dict[int, User] = {}
        self.requests: list[Recorded] = []
        #: uploaded files by file_id: (path, mime type, bytes); getFile + /file/bot<token>/
        self.files: dict[str, tuple[str, str, bytes]] = {}
        self.file_downloads: list[str] = []
        self.sent: list[Sent] = []
        self.typing: list[tuple[int, int | None, str]] = []
        #: editMessageText calls: (chat id, message id, new text, reply_markup or None)
        self.edits: list[tuple[int, int, str, Any]] = []
        #: deleteMessage calls that deleted something: (chat id, message id)
        self.deleted: list[tuple[int, int]] = []
        #: sendMessageDraft calls: (chat id, topic or None, draft id, text)
        self.drafts: list[tuple[int, int | None, int, str]] = []
        #: answerCallbackQuery calls: (callback_query_id, text, show_alert)
        self.callback_answers: list[tuple[str, str | None, bool]] = []
        self._callback_ids = itertools.count(4_000_000_001)
        self.commands: list[dict[str, Any]] = []
        self.webhook_url: str | None = None
        self.webhook_secret: str | None = None
        self.webhook_pushes: list[tuple[int, int]] = []  # (update_id, HTTP status or 0)
        self.allowed_updates: list[str] = []
        #: update_id -> how many times getUpdates or the pusher handed it out
        self.deliveries: dict[int, int] = {}
        self.confirmed: list[int] = []

        self._pending: list[dict[str, Any]] = []
        #: every update ever queued, by id
        self.history: dict[int, dict[str, Any]] = {}
        self._update_ids = itertools.count(700_000_001)
        self._user_ids = itertools.count(1_000_001)
        self._chat_ids = itertools.count(1_001_000_000_001)
        self._faults: dict[str, deque[Fault]] = {}
        #: set (and replaced) on every change that a long poll or the pusher waits for
        self._changed = asyncio.Event()
        self._poll_generation = 0
        #: set by stop(): a waiting long poll answers at once instead of holding the shutdown
        self._stopping = False
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._pusher: asyncio.Task[None] | None = None
        self._client: aiohttp.ClientSession | None = None

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self._stopping = True
        await self._stop_pusher()
        self._notify()
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def base_url(self) -> str:
        """For ``TELEGRAM_API_BASE_URL`` (the token is appended, like the real one)."""
        assert self._port is not None, "start() first"
        return f"http://127.0.0.1:{self._port}/bot"

    # --- the state model: chats, users, topics ----------------------------------------------

    def user(
        self, first_name: str = "Alice", *, username: str | None = None, is_bot: bool = False
    ) -> User:
        user = User(
            id=next(self._user_ids),
            first_name=first_name,
            username=username or first_name.lower(),
            is_bot=is_bot,
        )
        self.users[user.id] = user
        return user

    def forum(self, title: str = "Forum") -> Chat:
        return self._add_chat(
            Chat(id=-next(self._chat_ids), type="supergroup", title=title, is_forum=True)
        )

    def group(self, title: str = "Group") -> Chat:
        """A supergroup without topics (reply chains carry message_thread_id)."""
        return self._add_chat(Chat(id=-next(self._chat_ids), type="supergroup", title=title))

    def basic_group(self, title: str = "Basic group") -> Chat:
        return self._add_chat(Chat(id=-next(self._user_ids), type="group", title=title))

    def channel(self, title: str = "Channel") -> Chat:
        return self._add_chat(Chat(id=-next(self._chat_ids), type="channel", title=title))

    def direct_messages(self, title: str = "Channel DMs") -> Chat:
        return self._add_chat(
            Chat(id=-next(self._chat_ids), type="supergroup", title=title, is_direct_messages=True)
        )

    def private(self, user: User, *, topics: bool = False) -> Chat:
        chat = self.chats.get(user.id)
        if chat is None:
            chat = self._add_chat(Chat(id=user.id, type="private", user=user))
        chat.topics_enabled = chat.topics_enabled or topics
        return chat

    def business_connection(self, owner: User) -> str:
        connection_id = f"bc-{owner.id}-{len(self.business_connections) + 1}"
        self.business_connections[connection_id] = owner
        return connection_id

    def business_chat(self, connection_id: str, customer: User) -> Chat:
        """The private chat of a business account with ``customer`` (its own id space)."""
        key = (connection_id, customer.id)
        if key not in self.business_chats:
            self.business_chats[key] = Chat(
                id=customer.id, type="private", user=customer, business_connection_id=connection_id
            )
        return self.business_chats[key]

    def _add_chat(self, chat: Chat) -> Chat:
        self.chats[chat.id] = chat
        return chat

    def create_topic(self, chat: Chat, name: str, *, by: User | None = None) -> int:
        """A user creates a topic: the forum_topic_created service message's id is the
        topic's id, and bots receive that service message as an update."""
        assert chat.is_forum or chat.topics_enabled
        author = by or chat.user or self._default_user()
        mid = chat.next_message_id()
        message = self._base_message(chat, mid, author)
        message["message_thread_id"] = mid
        message["forum_topic_created"] = {"name": name, "icon_color": 7322096}
        message["is_topic_message"] = True
        chat.topics[mid] = Topic(id=mid, name=name)
        self._store(chat, message, topic=mid)
        self.push({"message": message})
        return mid

    def close_topic(self, chat: Chat, topic: int, *, by: User | None = None) -> dict[str, Any]:
        chat.topics[topic].closed = True
        return self.service(chat, "forum_topic_closed", {}, topic=topic, by=by)

    def delete_topic(self, chat: Chat, topic: int) -> None:
        """Deleting a topic sends no update; later sends to it fail."""
        chat.topics[topic].deleted = True

    # --- the user side ----------------------------------------------------------------------

    def user_says(
        self,
        chat: Chat,
        text: str,
        *,
        user: User | None = None,
        topic: int | None = None,
        reply_to: int | Mapping[str, Any] | Sent | None = None,
        entities: list[dict[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A person posts ``text``; the bot gets the update Telegram would send. ``topic`` is a
        forum / private-chat topic id (None = General or a chat without topics)."""
        author = user or chat.user or self._default_user()
        mid = chat.next_message_id()
        message = self._base_message(chat, mid, author)
        message["text"] = text
        found = _entities(text)
        if entities:
            found.extend(entities)
        if found:
            message["entities"] = found
        where = self._place(chat, message, topic=topic, reply_to=reply_to)
        if chat.is_direct_messages:
            topic_id = chat.dm_topics.setdefault(author.id, 10_000 + len(chat.dm_topics) + 1)
            message["direct_messages_topic"] = {"topic_id": topic_id, "user": author.to_dict()}
        if extra:
            message.update(extra)
        self._store(chat, message, topic=where)
        if chat.business_connection_id is not None:
            message["business_connection_id"] = chat.business_connection_id
            self.push({"business_message": message})
        elif chat.type == "channel":
            self.push({"channel_post": message})
        else:
            self.push({"message": message})
        return message

    def user_edits(self, chat: Chat, message: Mapping[str, Any], text: str) -> dict[str, Any]:
        stored = chat.messages[int(message["message_id"])]
        stored["text"] = text
        stored["edit_date"] = int(time.time())
        found = _entities(text)
        if found:
            stored["entities"] = found
        else:
            stored.pop("entities", None)
        kind = "edited_message"
        if chat.business_connection_id is not None:
            kind = "edited_business_message"
        elif chat.type == "channel":
            kind = "edited_channel_post"
        self.push({kind: dict(stored)})
        return stored

    def service(
        self,
        chat: Chat,
        kind: str,
        value: Any,
        *,
        topic: int | None = None,
        by: User | None = None,
    ) -> dict[str, Any]:
        """A service message (``new_chat_members``, ``forum_topic_edited``, ...)."""
        author = by or chat.user or self._default_user()
        mid = chat.next_message_id()
        message = self._base_message(chat, mid, author)
        if topic is not None:
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
        message[kind] = value
        self._store(chat, message, topic=topic)
        self.push({"message": message})
        return message

    def push(self, body: Mapping[str, Any]) -> int:
        """Queue a raw update (any shape); returns its update_id."""
        update_id = next(self._update_ids)
        update = {"update_id": update_id, **body}
        self.history[update_id] = update
        self._pending.append(update)
        self._notify()
        return update_id

    def replay(self, update_id: int) -> None:
        """Deliver an update again with the same update_id (a webhook retry after a lost
        answer, a redelivery after a crash)."""
        self._pending.append(copy.deepcopy(self.history[update_id]))
        self._notify()

    def pending_update_ids(self) -> list[int]:
        return [u["update_id"] for u in self._pending]

    def messages_in(self, chat: Chat, topic: int | None = None) -> list[dict[str, Any]]:
        return [m for mid, m in chat.messages.items() if chat.topic_of.get(mid) == topic]

    def sent_to(self, chat: Chat, topic: int | None = None) -> list[Sent]:
        return [s for s in self.sent if s.chat_id == chat.id and s.topic == topic]

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.method.lower() == method.lower()]

    # --- fault injection --------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        *,
        times: int = 1,
        status: int = 500,
        description: str = "Internal Server Error",
        retry_after: int | None = None,
    ) -> None:
        self._add_faults(
            method, times, Fault(status=status, description=description, retry_after=retry_after)
        )

    def flood_next(
        self, method: str = "sendMessage", *, times: int = 1, retry_after: int = 1
    ) -> None:
        """429 with parameters.retry_after, exactly like Telegram's flood control."""
        self.fail_next(
            method,
            times=times,
            status=429,
            description=f"Too Many Requests: retry after {retry_after}",
            retry_after=retry_after,
        )

    def delay_next(self, method: str, seconds: float, *, times: int = 1) -> None:
        self._add_faults(method, times, Fault(delay=seconds))

    def drop_next(self, method: str, *, times: int = 1, after_applying: bool = False) -> None:
        """Close the connection without answering (after doing the call if asked)."""
        self._add_faults(method, times, Fault(drop=True, apply=after_applying))

    def pending_faults(self, method: str) -> int:
        """Faults scheduled for ``method`` that no call has met yet."""
        return len(self._faults.get(method.lower(), ()))

    def _add_faults(self, method: str, times: int, fault: Fault) -> None:
        queue = self._faults.setdefault(method.lower(), deque())
        queue.extend(fault for _ in range(times))

    # --- waiting (tests poll a condition with a deadline, never sleep-then-assert) ----------

    async def wait_until(
        self, condition: Callable[[], bool], *, within: float = 5.0, what: str = "condition"
    ) -> None:
        deadline = asyncio.get_running_loop().time() + within
        while not condition():
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"timed out after {within}s waiting for {what}")
            await asyncio.sleep(0.01)

    # --- internals: building messages -------------------------------------------------------

    def _default_user(self) -> User:
        for user in self.users.values():
            if not user.is_bot:
                return user
        return self.user("Alice")

    def _base_message(self, chat: Chat, mid: int, author: User) -> dict[str, Any]:
        message: dict[str, Any] = {
            "message_id": mid,
            "from": author.to_dict(),
            "chat": chat.to_dict(),
            "date": int(time.time()),
        }
        return message

    def _place(
        self,
        chat: Chat,
        message: dict[str, Any],
        *,
        topic: int | None,
        reply_to: int | Mapping[str, Any] | Sent | None,
    ) -> int | None:
        """Fill the thread fields the way Telegram does; return the topic it lives in."""
        replied_id = _message_id(reply_to)
        replied = chat.messages.get(replied_id) if replied_id is not None else None
        if replied_id is not None and replied is None:
            raise KeyError(f"no message {replied_id} in chat {chat.id}")
        if topic is not None:
            assert chat.is_forum or chat.topics_enabled, "topics exist only in forums"
            live = chat.topics.get(topic)
            assert live is not None and not live.deleted, f"no topic {topic}"
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
            if replied is not None:
                assert chat.topic_of.get(replied_id) == topic, "reply across topics"  # type: ignore[arg-type]
                message["reply_to_message"] = _strip(replied)
            elif topic in chat.messages:
                # every message in a topic replies to the topic's creation service message
                # (payload telegram_update_forum_topic_message.json)
                message["reply_to_message"] = _strip(chat.messages[topic])
            return topic
        if replied is not None:
            assert replied_id is not None
            message["reply_to_message"] = _strip(replied)
            if chat.type == "supergroup":
                # reply chains: message_thread_id = chain root, no is_topic_message
                # (platforms.md §1.3-1.4)
                root = chat.chain_root_of.get(replied_id, replied_id)
                chat.chain_root_of[int(message["message_id"])] = root
                message["message_thread_id"] = root
            return chat.topic_of.get(replied_id)
        return None

    def _store(self, chat: Chat, message: dict[str, Any], *, topic: int | None) -> None:
        mid = int(message["message_id"])
        chat.messages[mid] = message
        chat.topic_of[mid] = topic

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        if self.webhook_url is not None and not self._stopping:
            self._ensure_pusher()

    async def _wait_change(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout=seconds)

    # --- the wire API -----------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        match = _PATH_RE.match(request.path)
        if match is None:
            return _error(404, "Not Found")
        params, body = await _read_params(request)
        method = match["method"]
        self.requests.append(
            Recorded(
                method=method,
                params=params,
                headers=dict(request.headers),
                content_type=request.content_type,
                body=body,
                at=time.monotonic(),
            )
        )
        if match["token"] != self.token:
            return _error(401, "Unauthorized")
        handler = self._handlers().get(method.lower())
        if handler is None:
            return _error(404, "Not Found")
        queue = self._faults.get(method.lower())
        fault = queue.popleft() if queue else None
        if fault is not None:
            if fault.delay:
                await asyncio.sleep(fault.delay)
            if fault.drop:
                if fault.apply:
                    await handler(params)
                assert request.transport is not None
                request.transport.close()
                return web.Response(status=500)
            if fault.status is not None:
                return _error(fault.status, fault.description, retry_after=fault.retry_after)
        return await handler(params)

    def upload(self, name: str, content: bytes, mime_type: str) -> dict[str, Any]:
        """A ``Document`` as a message carries it (``extra={"document": ...}``)."""
        file_id = f"BQACAgIAAx{len(self.files) + 1:06d}"
        self.files[file_id] = (f"documents/file_{len(self.files)}.bin", mime_type, content)
        return {
            "file_id": file_id,
            "file_unique_id": f"AgAD{len(self.files):06d}",
            "file_name": name,
            "mime_type": mime_type,
            "file_size": len(content),
        }

    async def _get_file(self, params: dict[str, Any]) -> web.Response:
        file_id = str(params.get("file_id"))
        found = self.files.get(file_id)
        if found is None:
            return _error(400, "Bad Request: invalid file_id")
        path, _, content = found
        return _ok(
            {
                "file_id": file_id,
                "file_unique_id": file_id[-6:],
                "file_size": len(content),
                "file_path": path,
            }
        )

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=404)
        path = request.match_info["path"]
        for file_id, (stored, mime, content) in self.files.items():
            if stored == path:
                self.file_downloads.append(file_id)
                return web.Response(body=content, content_type=mime)
        return web.Response(status=404)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[web.Response]]]:
        return {
            "getfile": self._get_file,
            "getme": self._get_me,
            "getupdates": self._get_updates,
            "setwebhook": self._set_webhook,
            "deletewebhook": self._delete_webhook,
            "getwebhookinfo": self._get_webhook_info,
            "setmycommands": self._set_my_commands,
            "sendmessage": self._send_message,
            "sendphoto": self._send_photo,
            "senddocument": self._send_document,
            "sendchataction": self._send_chat_action,
            "editmessagetext": self._edit_message_text,
            "deletemessage": self._delete_message,
            "sendmessagedraft": self._send_message_draft,
            "answercallbackquery": self._answer_callback_query,
            "createforumtopic": self._create_forum_topic,
            "close": self._ok_true,
            "logout": self._ok_true,
        }

    async def _ok_true(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _get_me(self, params: dict[str, Any]) -> web.Response:
        me = self.bot.to_dict()
        me.update(
            can_join_groups=True,
            can_read_all_group_messages=not self.privacy_mode,
            supports_inline_queries=False,
            can_connect_to_business=False,
            has_main_web_app=False,
            has_topics_enabled=False,
        )
        return _ok(me)

    async def _get_updates(self, params: dict[str, Any]) -> web.Response:
        if self.webhook_url is not None:
            return _error(
                409,
                "Conflict: can't use getUpdates method while webhook is active; "
                "use deleteWebhook to delete the webhook first",
            )
        offset = _as_int(params.get("offset"))
        limit = _as_int(params.get("limit")) or 100
        timeout = float(params.get("timeout") or 0)
        allowed = _as_json(params.get("allowed_updates"))
        if isinstance(allowed, list):
            self.allowed_updates = [str(a) for a in allowed]
        if offset is not None:
            self._confirm(offset)
        self._poll_generation += 1
        generation = self._poll_generation
        self._notify()  # an older long poll is terminated by this one
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            if generation != self._poll_generation:
                return _error(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure "
                    "that only one bot instance is running",
                )
            batch = self._deliverable()[:limit]
            remaining = deadline - asyncio.get_running_loop().time()
            if batch or remaining <= 0 or self._stopping:
                for update in batch:
                    uid = update["update_id"]
                    self.deliveries[uid] = self.deliveries.get(uid, 0) + 1
                return _ok(batch)
            await self._wait_change(remaining)

    def _confirm(self, offset: int) -> None:
        if offset < 0:
            keep = self._pending[offset:]
            dropped = self._pending[: len(self._pending) - len(keep)]
        else:
            keep = [u for u in self._pending if u["update_id"] >= offset]
            dropped = [u for u in self._pending if u["update_id"] < offset]
        self.confirmed.extend(u["update_id"] for u in dropped)
        self._pending = keep

    def _deliverable(self) -> list[dict[str, Any]]:
        """Pending updates of allowed types; others are dropped, as Telegram does."""
        out = []
        for update in list(self._pending):
            kind = next(k for k in update if k != "update_id")
            allowed = (
                kind in self.allowed_updates
                if self.allowed_updates
                else (kind not in _NOT_BY_DEFAULT)
            )
            if allowed:
                out.append(update)
            else:
                self._pending.remove(update)
        return out

    async def _set_webhook(self, params: dict[str, Any]) -> web.Response:
        url = params.get("url") or ""
        if not url:
            return await self._delete_webhook(params)
        secret = params.get("secret_token")
        if secret is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", str(secret)):
            return _error(400, "Bad Request: secret token contains unallowed characters")
        allowed = _as_json(params.get("allowed_updates"))
        if isinstance(allowed, list):
            self.allowed_updates = [str(a) for a in allowed]
        if _as_bool(params.get("drop_pending_updates")):
            self._pending.clear()
        self.webhook_url = str(url)
        self.webhook_secret = str(secret) if secret is not None else None
        self._poll_generation += 1  # a waiting getUpdates ends
        self._notify()
        return _ok(True)

    async def _delete_webhook(self, params: dict[str, Any]) -> web.Response:
        if _as_bool(params.get("drop_pending_updates")):
            self._pending.clear()
        self.webhook_url = None
        self.webhook_secret = None
        await self._stop_pusher()
        return _ok(True)

    async def _get_webhook_info(self, params: dict[str, Any]) -> web.Response:
        return _ok(
            {
                "url": self.webhook_url or "",
                "has_custom_certificate": False,
                "pending_update_count": len(self._pending),
            }
        )

    async def _set_my_commands(self, params: dict[str, Any]) -> web.Response:
        commands = _as_json(params.get("commands"))
        if not isinstance(commands, list):
            return _error(400, "Bad Request: commands must be an array")
        self.commands = [dict(c) for c in commands]
        return _ok(True)

    def _find_chat(self, params: dict[str, Any]) -> Chat | web.Response:
        chat_id = _as_int(params.get("chat_id"))
        business = params.get("business_connection_id")
        if business is not None:
            if business not in self.business_connections:
                return _error(400, "Bad Request: BUSINESS_CONNECTION_INVALID")
            chat = self.business_chats.get((str(business), chat_id or 0))
        else:
            chat = self.chats.get(chat_id) if chat_id is not None else None
        if chat is None:
            return _error(400, CHAT_NOT_FOUND)
        return chat

    def _check_thread(self, chat: Chat, thread: int | None) -> web.Response | None:
        if thread is None:
            return None
        if chat.is_forum and thread == 1 and self.thread_id_1_is_general:
            return None
        topic = chat.topics.get(thread) if (chat.is_forum or chat.topics_enabled) else None
        if topic is None or topic.deleted:
            # reply-chain roots, General's id 1, deleted topics (tdlib/telegram-bot-api#447)
            return _error(400, THREAD_NOT_FOUND)
        if topic.closed:
            return _error(400, "Bad Request: TOPIC_CLOSED")
        return None

    async def _send_photo(self, params: dict[str, Any]) -> web.Response:
        return await self._send_message(params, media="photo")

    async def _send_document(self, params: dict[str, Any]) -> web.Response:
        return await self._send_message(params, media="document")

    async def _send_message(
        self, params: dict[str, Any], *, media: str | None = None
    ) -> web.Response:
        chat = self._find_chat(params)
        if isinstance(chat, web.Response):
            return chat
        upload: Upload | None = None
        if media is None:
            text = str(params.get("text") or "")
            if not text.strip():
                return _error(400, "Bad Request: message text is empty")
            if utf16_len(text) > MAX_TEXT:
                return _error(400, TOO_LONG)
        else:
            upload = params.get("_files", {}).get(media)
            if upload is None:
                # [fake's wording] only uploads are modelled (no file_id / URL re-use)
                return _error(400, f"Bad Request: there is no {media} in the request")
            if media == "photo" and len(upload.data) > MAX_PHOTO_BYTES:
                return _error(400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
            text = str(params.get("caption") or "")
            if utf16_len(text) > MAX_CAPTION:
                return _error(400, "Bad Request: message caption is too long")
        entities = _as_json(params.get("entities" if media is None else "caption_entities")) or []
        entity_problem = _check_entities(text, entities, params.get("parse_mode"))
        if entity_problem is not None:
            return _error(400, f"Bad Request: can't parse entities: {entity_problem}")
        thread = _as_int(params.get("message_thread_id"))
        if thread == 1 and chat.is_forum and self.thread_id_1_is_general:
            thread = None
        thread_problem = self._check_thread(chat, thread)
        if thread_problem is not None:
            return thread_problem
        dm_topic = _as_int(params.get("direct_messages_topic_id"))
        if chat.is_direct_messages:
            if dm_topic is None or dm_topic not in chat.dm_topics.values():
                # [fake's wording] the real text for a missing DM topic was not captured
                return _error(400, "Bad Request: direct messages topic not found")
        reply_parameters = _as_json(params.get("reply_parameters"))
        replied_id: int | None = None
        if isinstance(reply_parameters, Mapping):
            replied_id = _as_int(reply_parameters.get("message_id"))
        elif params.get("reply_to_message_id") is not None:
            replied_id = _as_int(params.get("reply_to_message_id"))
            reply_parameters = {
                "allow_sending_without_reply": params.get("allow_sending_without_reply")
            }
        replied = chat.messages.get(replied_id) if replied_id is not None else None
        if replied_id is not None and replied is None:
            assert isinstance(reply_parameters, Mapping)
            if not _as_bool(reply_parameters.get("allow_sending_without_reply")):
                return _error(400, "Bad Request: message to be replied not found")
            replied_id = None
        # A reply lands where the replied message is; "the reply takes priority" over
        # message_thread_id (PaulSonOfLars/gotgbot#196, platforms.md §1.3)
        topic = chat.topic_of.get(replied_id) if replied_id is not None else thread
        mid = chat.next_message_id()
        message = self._base_message(chat, mid, self.bot)
        if media is None:
            message["text"] = text
        else:
            assert upload is not None
            message[media] = (
                [{"file_id": f"file-{mid}", "file_unique_id": f"u{mid}", "width": 1, "height": 1}]
                if media == "photo"
                else {
                    "file_id": f"file-{mid}",
                    "file_unique_id": f"u{mid}",
                    "file_name": upload.filename,
                }
            )
            if text:
                message["caption"] = text
        if entities:
            message["entities"] = sorted(
                [*entities, *_entities(text)], key=lambda e: (e["offset"], -e["length"])
            )
        if topic is not None:
            message["message_thread_id"] = topic
            message["is_topic_message"] = True
        if replied is not None and replied_id is not None:
            message["reply_to_message"] = _strip(replied)
            if topic is None and chat.type == "supergroup":
                root = chat.chain_root_of.get(replied_id, replied_id)
                chat.chain_root_of[mid] = root
                message["message_thread_id"] = root
        if chat.business_connection_id is not None:
            message["business_connection_id"] = chat.business_connection_id
        if dm_topic is not None and chat.is_direct_messages:
            message["direct_messages_topic"] = {"topic_id": dm_topic}
        markup = _as_json(params.get("reply_markup"))
        if isinstance(markup, Mapping):
            message["reply_markup"] = dict(markup)
        self._store(chat, message, topic=topic)
        self.sent.append(
            Sent(
                chat_id=chat.id,
                message_id=mid,
                text=text,
                topic=topic,
                reply_to=replied_id,
                business_connection_id=chat.business_connection_id,
                direct_messages_topic_id=dm_topic,
                params=params,
                entities=list(entities),
                media=media,
                upload=upload,
            )
        )
        return _ok(message)

    async def _edit_message_text(self, params: dict[str, Any]) -> web.Response:
        """editMessageText: new text; the inline keyboard is kept only if sent again."""
        chat = self._find_chat(params)
        if isinstance(chat, web.Response):
            return chat
        mid = _as_int(params.get("message_id"))
        message = chat.messages.get(mid) if mid is not None else None
        if message is None or mid is None:
            return _error(400, "Bad Request: message to edit not found")
        text = str(params.get("text") or "")
        markup = _as_json(params.get("reply_markup"))
        if text == message.get("text") and markup == message.get("reply_markup"):
            return _error(400, "Bad Request: message is not modified")
        message["text"] = text
        if isinstance(markup, Mapping):
            message["reply_markup"] = dict(markup)
        else:
            message.pop("reply_markup", None)
        message["edit_date"] = int(time.time())
        self.edits.append((chat.id, mid, text, markup))
        return _ok(message)

    async def _delete_message(self, params: dict[str, Any]) -> web.Response:
        chat = self._find_chat(params)
        if isinstance(chat, web.Response):
            return chat
        mid = _as_int(params.get("message_id"))
        if mid is None or chat.messages.pop(mid, None) is None:
            return _error(400, "Bad Request: message to delete not found")
        self.deleted.append((chat.id, mid))
        return _ok(True)

    async def _send_message_draft(self, params: dict[str, Any]) -> web.Response:
        """sendMessageDraft (Bot API 9.3): an ephemeral draft in a private chat."""
        chat = self._find_chat(params)
        if isinstance(chat, web.Response):
            return chat
        if chat.type != "private":
            # [fake's wording] drafts exist for private chats only
            return _error(400, "Bad Request: draft can be sent only to private chats")
        draft_id = _as_int(params.get("draft_id"))
        if not draft_id:
            return _error(400, "Bad Request: draft_id must be non-zero")
        text = str(params.get("text") or "")
        if utf16_len(text) > MAX_TEXT:
            return _error(400, TOO_LONG)
        thread = _as_int(params.get("message_thread_id"))
        self.drafts.append((chat.id, thread, draft_id, text))
        return _ok(True)

    def current_messages(self, chat: Chat, *, by_bot: bool = True) -> list[dict[str, Any]]:
        """The messages the chat shows now (after edits and deletes), oldest first."""
        return [
            m
            for _, m in sorted(chat.messages.items())
            if not by_bot or (m.get("from") or {}).get("id") == self.bot.id
        ]

    async def _answer_callback_query(self, params: dict[str, Any]) -> web.Response:
        query = str(params.get("callback_query_id") or "")
        if not query:
            return _error(400, "Bad Request: query is too old and response timeout expired")
        text = params.get("text")
        self.callback_answers.append(
            (query, str(text) if text is not None else None, _as_bool(params.get("show_alert")))
        )
        return _ok(True)

    def user_clicks(self, chat: Chat, message_id: int, data: str, *, user: User) -> str:
        """A person presses an inline button of the bot's message: the ``callback_query``
        update Telegram sends (the message as it is now, the button's ``callback_data``).
        Returns the callback query id."""
        query_id = str(next(self._callback_ids))
        self.push(
            {
                "callback_query": {
                    "id": query_id,
                    "from": user.to_dict(),
                    "message": dict(chat.messages[message_id]),
                    "chat_instance": f"ci{chat.id}",
                    "data": data,
                }
            }
        )
        return query_id

    async def _send_chat_action(self, params: dict[str, Any]) -> web.Response:
        chat = self._find_chat(params)
        if isinstance(chat, web.Response):
            return chat
        thread = _as_int(params.get("message_thread_id"))
        if chat.is_forum or chat.topics_enabled:
            problem = self._check_thread(chat, thread)
            if problem is not None:
                return problem
        self.typing.append((chat.id, thread, str(params.get("action"))))
        return _ok(True)

    async def _create_forum_topic(self, params: dict[str, Any]) -> web.Response:
        chat = self._find_chat(params)
        if isinstance(chat, web.Response):
            return chat
        if not (chat.is_forum or chat.topics_enabled):
            return _error(400, "Bad Request: the chat is not a forum")
        name = str(params.get("name") or "")
        mid = chat.next_message_id()
        message = self._base_message(chat, mid, self.bot)
        message.update(
            message_thread_id=mid,
            is_topic_message=True,
            forum_topic_created={"name": name, "icon_color": 7322096},
        )
        chat.topics[mid] = Topic(id=mid, name=name)
        self._store(chat, message, topic=mid)
        return _ok({"message_thread_id": mid, "name": name, "icon_color": 7322096})

    # --- webhook pusher ---------------------------------------------------------------------

    def _ensure_pusher(self) -> None:
        if self._pusher is None or self._pusher.done():
            with contextlib.suppress(RuntimeError):
                self._pusher = asyncio.get_running_loop().create_task(
                    self._push_loop(), name="fake-telegram-webhook-pusher"
                )

    async def _stop_pusher(self) -> None:
        task, self._pusher = self._pusher, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _push_loop(self) -> None:
        """POST pending updates one by one to the webhook; a non-2xx answer (or no answer)
        is retried, like Telegram does (setWebhook docs)."""
        if self._client is None:
            self._client = aiohttp.ClientSession()
        # the stop flag too: a cancel that lands as a wait ends can be swallowed by 3.11's
        # wait_for, and the loop must still end
        while self.webhook_url is not None and not self._stopping:
            batch = self._deliverable()
            if not batch:
                await self._wait_change(0.5)
                continue
            update = batch[0]
            uid = update["update_id"]
            headers = {"Content-Type": "application/json"}
            if self.webhook_secret is not None:
                headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook_secret
            self.deliveries[uid] = self.deliveries.get(uid, 0) + 1
            try:
                async with self._client.post(
                    self.webhook_url,
                    data=json.dumps(update),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=10),
                ) as response:
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            self.webhook_pushes.append((uid, status))
            if 200 <= status < 300:
                if update in self._pending:
                    self._pending.remove(update)
                    self.confirmed.append(uid)
            else:
                await asyncio.sleep(self.webhook_retry_delay)


# --- helpers --------------------------------------------------------------------------------


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str, *, retry_after: int | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if retry_after is not None:
        body["parameters"] = {"retry_after": retry_after}
    return web.json_response(body, status=code)


async def _read_params(request: web.Request) -> tuple[dict[str, Any], bytes]:
    """The Bot API accepts the query string, urlencoded, JSON and multipart bodies; objects
    arrive as JSON text in form bodies (platforms.md §1.11). Returns (params, raw body)."""
    params: dict[str, Any] = dict(request.query)
    if request.content_type == "multipart/form-data":
        form = await request.post()
        files: dict[str, Upload] = {}
        for key, value in form.items():
            if isinstance(value, str):
                params[key] = value
            elif isinstance(value, web.FileField):
                params[key] = value.filename
                files[key] = Upload(
                    filename=value.filename,
                    content_type=value.content_type,
                    data=value.file.read(),
                )
        if files:
            params["_files"] = files
        return params, b""
    body = await request.read()
    if not body:
        return params, body
    if request.content_type == "application/json":
        data = json.loads(body)
        if isinstance(data, dict):
            params.update(data)
    elif request.content_type == "application/x-www-form-urlencoded":
        params.update(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    return params, body


def _as_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.lower() in ("true", "1")
    return bool(value)


def _as_json(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _message_id(value: int | Mapping[str, Any] | Sent | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, Sent):
        return value.message_id
    if isinstance(value, Mapping):
        return int(value["message_id"])
    return int(value)


def _strip(message: Mapping[str, Any]) -> dict[str, Any]:
    """reply_to_message "will not contain further reply_to_message fields" (Bot API)."""
    return {k: v for k, v in message.items() if k != "reply_to_message"}


def _utf16_offset(text: str, index: int) -> int:
    return utf16_len(text[:index])


#: MessageEntity types a bot may send (Bot API "MessageEntity")
ENTITY_TYPES = frozenset(
    {
        "mention", "hashtag", "cashtag", "bot_command", "url", "email", "phone_number",
        "bold", "italic", "underline", "strikethrough", "spoiler", "blockquote",
        "expandable_blockquote", "code", "pre", "text_link", "text_mention", "custom_emoji",
    }
)  # fmt: skip


def _check_entities(text: str, entities: Any, parse_mode: Any) -> str | None:
    """Why ``entities`` are not valid for ``text`` (None when they are), as the Bot API
    checks them: a list of MessageEntity objects, offsets and lengths in UTF-16 code units
    inside the text and not splitting a surrogate pair, never together with a parse_mode
    ("entities: ... can be specified instead of parse_mode"), url on text_link, no entity
    inside pre/code, no intersecting entities. [fake's wording] for the error texts."""
    if not entities:
        return None
    if parse_mode:
        return "entities and parse_mode are mutually exclusive"
    if not isinstance(entities, list):
        return "entities must be a JSON array"
    units = utf16_len(text)
    # UTF-16 offsets that fall inside a surrogate pair
    inside_pairs, pos = set(), 0
    for ch in text:
        pos += 1
        if ord(ch) > 0xFFFF:
            inside_pairs.add(pos)
            pos += 1
    spans: list[tuple[int, int, str]] = []
    for e in entities:
        if not isinstance(e, Mapping) or e.get("type") not in ENTITY_TYPES:
            return f"unsupported entity {e!r}"
        offset, length = e.get("offset"), e.get("length")
        if not isinstance(offset, int) or not isinstance(length, int):
            return "entity offset and length must be integers"
        if offset < 0 or length <= 0 or offset + length > units:
            return f"entity {e['type']} [{offset}, {offset + length}) is outside the text"
        if offset in inside_pairs or offset + length in inside_pairs:
            return f"entity {e['type']} cuts a surrogate pair"
        if e["type"] == "text_link" and not str(e.get("url") or ""):
            return "text_link without url"
        spans.append((offset, offset + length, str(e["type"])))
    for a0, a1, at in spans:
        for b0, b1, bt in spans:
            if (a0, a1, at) == (b0, b1, bt):
                continue
            if a0 < b0 < a1 < b1:
                return f"entities {at} and {bt} intersect"
            if at in ("pre", "code") and a0 <= b0 and b1 <= a1 and (a0, a1) != (b0, b1):
                return f"{at} cannot contain {bt}"
    return None


def _entities(text: str) -> list[dict[str, Any]]:
    """The entities Telegram's server adds on its own: a leading bot_command, @mentions."""
    out: list[dict[str, Any]] = []
    command = _COMMAND_RE.match(text)
    if command:
        out.append({"offset": 0, "length": utf16_len(command.group(0)), "type": "bot_command"})
    for match in _MENTION_RE.finditer(text):
        if command and match.start() < command.end():
            continue
        out.append(
            {
                "offset": _utf16_offset(text, match.start()),
                "length": utf16_len(match.group(0)),
                "type": "mention",
            }
        )
    return out
