"""Telegram's raw send (one already-split part) and the python-telegram-bot client it uses.

Error translation into ``DeliveryError`` happens once, in ``translate_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import logging
import os
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

import httpx
import structlog
import telegram
from telegram.constants import ChatAction
from telegram.error import (
    BadRequest,
    ChatMigrated,
    Forbidden,
    InvalidToken,
    NetworkError,
    RetryAfter,
    TelegramError,
    TimedOut,
)

from gateway.domain import Attachment, ReplyTarget
from gateway.errors import DeliveryError
from gateway.knowledge.attachments import FileFetchError, download, too_large
from gateway.ports import SendResult

#: the Bot API lets bots download files of at most 20 MB (getFile)
DOWNLOAD_LIMIT = 20 * 1024 * 1024

log = structlog.get_logger(__name__)

PLATFORM = "telegram"
#: sendMessage "1-4096 characters after entities parsing" (platforms.md §1.9)
MAX_MESSAGE_LENGTH = 4096
#: Telegram FAQ: ~1 message/s per chat, 20 messages/minute per group (platforms.md §1.10)
CHAT_INTERVAL = 1.0
GROUP_INTERVAL = 3.0


class TelegramBot(telegram.Bot):
    """PTB's Bot plus getUpdates returning the raw JSON.

    ``Bot.get_updates`` parses the whole batch into ``Update`` objects and raises if one of
    them does not fit PTB's model (a missing ``date`` -> ``KeyError``), which would wedge the
    offset forever; the raw dicts go through our pure ``extract`` instead, one at a time.
    """

    def __init__(self, token: str, base_url: str, **kwargs: Any) -> None:
        # PTB 22.x warns (PTBDeprecationWarning) whenever RetryAfter.retry_after is read as
        # an int, including inside RetryAfter's own constructor, i.e. on every 429; opting in
        # to timedeltas is PTB's documented way out (translate_error handles both shapes).
        os.environ.setdefault("PTB_TIMEDELTA", "true")
        _install_redaction(token)
        # base_url gets the token appended (platforms.md §1.11); file downloads go to the
        # same server's /file/bot<token>/<path> (knowledge base, issue 15)
        if base_url.endswith("/bot"):
            kwargs.setdefault("base_file_url", base_url[: -len("bot")] + "file/bot")
        super().__init__(token=token, base_url=base_url, **kwargs)

    async def get_raw_updates(
        self,
        *,
        offset: int | None,
        poll_seconds: int,
        limit: int = 100,
        allowed_updates: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        data: dict[str, Any] = {
            "offset": offset,
            "timeout": poll_seconds,
            "limit": limit,
            "allowed_updates": list(allowed_updates) if allowed_updates is not None else None,
        }
        read_timeout = (self._request[0].read_timeout or 0) + poll_seconds
        result = await self._post("getUpdates", data, read_timeout=read_timeout)
        if not isinstance(result, list):
            raise NetworkError(f"getUpdates returned {type(result).__name__}, not a list")
        return [cast("dict[str, Any]", u) for u in result]


class _RedactToken(logging.Filter):
    """httpx logs every request URL at INFO and PTB logs its base URL at DEBUG; the Bot API
    puts the token in the URL path, so scrub it before any handler sees the record."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self._token in message:
            record.msg = message.replace(self._token, "<redacted>")
            record.args = None
        return True


def _install_redaction(token: str) -> None:
    for name in ("httpx", "telegram.Bot", "telegram.request.HTTPXRequest"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactToken) and f._token == token for f in logger.filters):
            logger.addFilter(_RedactToken(token))


def make_bot(token: str, base_url: str) -> TelegramBot:
    """Build the client; no network I/O (``initialize`` does ``getMe``)."""
    # HTTPXRequest does not retry, so a send is attempted exactly once per call
    # (architecture.md invariant 3).
    return TelegramBot(token=token, base_url=base_url)


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _seconds(value: int | float | dtm.timedelta) -> float:
    if isinstance(value, dtm.timedelta):
        return value.total_seconds()
    return float(value)


def translate_error(exc: TelegramError) -> DeliveryError:
    """The one place where PTB's exceptions become ``DeliveryError`` (style.md habit 6)."""
    if isinstance(exc, RetryAfter):
        # the private timedelta: the public property warns unless PTB_TIMEDELTA is set
        seconds = _seconds(exc._retry_after)
        return DeliveryError(
            f"telegram flood control: retry after {seconds:g}s", retry_after=seconds
        )
    if isinstance(exc, ChatMigrated):
        # the group became a supergroup with a new id; the stored target can never work again
        return DeliveryError(f"telegram chat migrated to {exc.new_chat_id}", permanent=True)
    if isinstance(exc, TimedOut):
        cause = exc.__cause__
        if isinstance(cause, httpx.ConnectTimeout | httpx.PoolTimeout):
            # the request never left this process, so a retry cannot double-post
            return DeliveryError(f"telegram: {exc.message}")
        # read timeout: Telegram may have posted the message without us seeing the answer
        return DeliveryError(f"telegram timed out: {exc.message}", ambiguous=True)
    if isinstance(exc, BadRequest | Forbidden | InvalidToken):
        # "message thread not found" (deleted topic), "chat not found", "bot was blocked by
        # the user", "message is too long", a revoked token: retrying cannot help
        return DeliveryError(exc.message, permanent=True)
    if isinstance(exc, NetworkError):
        cause = exc.__cause__
        if isinstance(cause, httpx.ReadError | httpx.RemoteProtocolError):
            # the request was written and the connection died before the answer
            return DeliveryError(f"telegram: {exc.message}", ambiguous=True)
        return DeliveryError(f"telegram: {exc.message}")
    return DeliveryError(f"telegram: {exc.message}")


def _int(value: str, field: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise DeliveryError(f"stored target has a bad {field}: {value!r}", permanent=True) from exc


class TelegramTransport:
    """sendMessage / sendChatAction to a stored ``ReplyTarget``, plain text only."""

    platform = PLATFORM
    max_message_length = MAX_MESSAGE_LENGTH
    #: the Bot API has no idempotency key: a retried sendMessage posts again
    idempotent = False
    resend_window: float | None = None

    def __init__(
        self,
        bot: TelegramBot,
        *,
        drain_seconds: float = 10.0,
        chat_interval: float = CHAT_INTERVAL,
        group_interval: float = GROUP_INTERVAL,
    ) -> None:
        self._bot = bot
        self._chat_interval = chat_interval
        self._group_interval = group_interval
        self._lock = asyncio.Lock()
        self._closed = False
        self._drain_seconds = drain_seconds
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def bot(self) -> TelegramBot:
        return self._bot

    async def open(self) -> None:
        """Initialize the HTTP clients and resolve the bot (``getMe``); idempotent."""
        async with self._lock:
            if self._closed:
                raise DeliveryError("telegram transport is stopped")
            await self._bot.initialize()

    async def close(self) -> None:
        """Refuse new sends, let in-flight ones finish (bounded), then close the clients.

        The core stops adapters before it drains deliveries, so a send cut off here would be
        an ambiguous double-post risk; a send refused here is a plain transient failure that
        the delivery worker retries after the restart."""
        async with self._lock:
            self._closed = True
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=self._drain_seconds)
        except TimeoutError:
            log.warning("telegram_close_with_sends_in_flight", in_flight=self._in_flight)
        async with self._lock:
            await self._bot.shutdown()

    @contextlib.asynccontextmanager
    async def _call(self) -> AsyncIterator[None]:
        """Open on first use and count the call as in flight until it returns."""
        try:
            await self.open()
        except TelegramError as exc:
            raise translate_error(exc) from exc
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    def measure(self, text: str) -> int:
        # Entity offsets count UTF-16 code units and the docs do not say which unit the 4096
        # limit uses, so count the larger one (platforms.md §1.9).
        return utf16_length(text)

    def format(self, text: str) -> str:
        # Sent without parse_mode: Markdown from the agent stays literal, so a split can never
        # produce an unbalanced entity ("can't parse entities").
        return text

    def pace(self, target: ReplyTarget) -> Sequence[tuple[str, float]]:
        rules = [(f"chat:{target.chat_id}", self._chat_interval)]
        if target.chat_id.startswith("-"):
            # groups and supergroups have negative ids; private chats are the user's id
            rules.append((f"group:{target.chat_id}", self._group_interval))
        return rules

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        kwargs = self._routing(target)
        if target.reply_to_message_id is not None:
            # allow_sending_without_reply: if the user deleted their message the answer still
            # lands in the same place, because the thread is always passed explicitly
            kwargs["reply_parameters"] = telegram.ReplyParameters(
                message_id=_int(target.reply_to_message_id, "reply_to_message_id"),
                allow_sending_without_reply=True,
            )
        dm_topic = target.extra.get("direct_messages_topic_id")
        if dm_topic is not None:
            kwargs["direct_messages_topic_id"] = _int(dm_topic, "direct_messages_topic_id")
        try:
            async with self._call():
                message = await self._bot.send_message(chat_id=target.chat_id, text=text, **kwargs)
        except TelegramError as exc:
            error = translate_error(exc)
            log.warning(
                "telegram_send_failed",
                chat_id=target.chat_id,
                thread_id=target.thread_id,
                idempotency_key=idempotency_key,
                error=str(error),
                permanent=error.permanent,
                retry_after=error.retry_after,
                ambiguous=error.ambiguous,
            )
            raise error from exc
        return SendResult(platform_message_id=str(message.message_id))

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        """getFile, then the download (knowledge base, issue 15); the Bot API's own limit
        for bots is 20 MB, whatever GATEWAY_MAX_FILE_BYTES says."""
        limit = min(max_bytes, DOWNLOAD_LIMIT)
        if not attachment.file_id:
            raise FileFetchError(f"Telegram gave no file id for {attachment.name or 'a file'}")
        if attachment.size is not None and attachment.size > limit:
            raise too_large(attachment.name, attachment.size, limit)
        try:
            found = await self._bot.get_file(attachment.file_id)
        except TelegramError as exc:
            raise FileFetchError(f"Telegram would not give {attachment.name}: {exc}") from exc
        if not found.file_path:
            raise FileFetchError(f"Telegram gave no download path for {attachment.name}")
        async with httpx.AsyncClient(timeout=60) as http:
            return await download(http, found.file_path, max_bytes=limit, name=attachment.name)

    async def typing(self, target: ReplyTarget) -> None:
        if "direct_messages_topic_id" in target.extra:
            # sendChatAction: "channel direct messages chats aren't supported" (Bot API)
            return
        try:
            async with self._call():
                await self._bot.send_chat_action(
                    chat_id=target.chat_id, action=ChatAction.TYPING, **self._routing(target)
                )
        except (TelegramError, DeliveryError) as exc:
            # A lost typing indicator is cosmetic; the reply itself is what must not be lost.
            log.info("telegram_typing_failed", chat_id=target.chat_id, error=str(exc))

    def _routing(self, target: ReplyTarget) -> dict[str, Any]:
        """Thread and business routing shared by sendMessage and sendChatAction: the topic id
        only when the target has one (never 1 for General, never a reply-chain id)."""
        kwargs: dict[str, Any] = {}
        if target.thread_id is not None:
            kwargs["message_thread_id"] = _int(target.thread_id, "thread_id")
        business = target.extra.get("business_connection_id")
        if business:
            kwargs["business_connection_id"] = business
        return kwargs
