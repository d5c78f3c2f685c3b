"""Telegram's raw send (one already-split part) and the python-telegram-bot client it uses.

Error translation into ``DeliveryError`` happens once, in ``translate_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
import logging
import os
import warnings
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
from telegram.warnings import PTBDeprecationWarning

from adapters.telegram import markdown
from adapters.telegram.extract import APPROVAL_PREFIX
from adapters.telegram.http import AiohttpRequest, is_lost_answer, is_unsent
from gateway.core.attachments import FileFetchError, download, too_large
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule, SendResult
from gateway.core.text import utf16_len

#: the Bot API lets bots download files of at most 20 MB (getFile)
DOWNLOAD_LIMIT = 20 * 1024 * 1024

log = structlog.get_logger(__name__)

PLATFORM = "telegram"
#: sendMessage "1-4096 characters after entities parsing" (platforms.md §1.9)
MAX_MESSAGE_LENGTH = 4096
#: Telegram FAQ: ~1 message/s per chat, 20 messages/minute per group (platforms.md §1.10)
CHAT_INTERVAL = 1.0
GROUP_INTERVAL = 3.0
#: "We may allow short bursts that go over this limit" (Bot FAQ, platforms.md §1.10): a few
#: replies in a quiet chat go at once, the average stays at the intervals above (20 a minute
#: in a group). PTB's own AIORateLimiter lets a whole group minute (20) go at once.
BURST = 3
#: sendChatAction: "the status is set for 5 seconds or less" (platforms.md §1), so renew at 4
TYPING_INTERVAL = 4.0
#: sendPhoto/sendDocument: "0-1024 characters after entities parsing"; photos up to 10 MB
MAX_CAPTION_LENGTH = 1024
MAX_PHOTO_BYTES = 10 * 1024 * 1024


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
        # same server's /file/bot<token>/<path> (knowledge base)
        if base_url.endswith("/bot"):
            kwargs.setdefault("base_file_url", base_url[: -len("bot")] + "file/bot")
        # aiohttp under PTB (``adapters/telegram/http.py``): a fifth of httpx's CPU per call.
        # getUpdates has a connection of its own, as PTB's default gives it
        kwargs.setdefault("request", AiohttpRequest())
        kwargs.setdefault("get_updates_request", AiohttpRequest(connection_pool_size=1))
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
    # AiohttpRequest (like PTB's HTTPXRequest) does not retry, so a send is attempted exactly
    # once per call
    # (architecture.md invariant 3).
    return TelegramBot(token=token, base_url=base_url)


def retry_after_seconds(exc: RetryAfter) -> float:
    """``RetryAfter.retry_after`` (PTB's public attribute) in seconds.

    PTB 22.2+ returns a ``timedelta`` when ``PTB_TIMEDELTA`` is on (``TelegramBot`` turns it
    on unless the environment says otherwise) and otherwise an int or float plus a
    ``PTBDeprecationWarning`` on every read; both shapes are accepted, and that one warning
    is silenced here because we already read the value the way PTB asks us to."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    if isinstance(value, dtm.timedelta):
        return value.total_seconds()
    return float(value)


def translate_error(exc: TelegramError) -> DeliveryError:
    """The one place where PTB's exceptions become ``DeliveryError`` (style.md habit 6)."""
    if isinstance(exc, RetryAfter):
        seconds = retry_after_seconds(exc)
        return DeliveryError(
            f"telegram flood control: retry after {seconds:g}s", retry_after=seconds
        )
    if isinstance(exc, ChatMigrated):
        # the group became a supergroup with a new id; the stored target can never work again
        return DeliveryError(f"telegram chat migrated to {exc.new_chat_id}", permanent=True)
    if isinstance(exc, TimedOut):
        cause = exc.__cause__
        if isinstance(cause, httpx.ConnectTimeout | httpx.PoolTimeout) or is_unsent(cause):
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
        if isinstance(cause, httpx.ReadError | httpx.RemoteProtocolError) or is_lost_answer(cause):
            # the request was written and the connection died before the answer
            return DeliveryError(f"telegram: {exc.message}", ambiguous=True)
        return DeliveryError(f"telegram: {exc.message}")
    return DeliveryError(f"telegram: {exc.message}")


def _about_entities(exc: BadRequest) -> bool:
    """Telegram refused the formatting ("can't parse entities", "wrong ... url" of a
    text_link), not the message: then sending it unformatted is safe and loses nothing."""
    message = exc.message.lower()
    return "entit" in message or "url" in message


def _clip_utf16(text: str, limit: int) -> str:
    while utf16_len(text) > limit:
        text = text[: -max(1, (utf16_len(text) - limit) // 2)]
    return text


def _int(value: str, field: str) -> int:
    try:
        return int(value)
    except ValueError as exc:
        raise DeliveryError(f"stored target has a bad {field}: {value!r}", permanent=True) from exc


class TelegramTransport:
    """sendMessage (text plus entities) / sendChatAction to a stored ``ReplyTarget``."""

    platform = PLATFORM
    max_message_length = MAX_MESSAGE_LENGTH
    #: the Bot API has no idempotency key: a retried sendMessage posts again
    idempotent = False
    resend_window: float | None = None
    typing_interval = TYPING_INTERVAL

    def __init__(
        self,
        bot: TelegramBot,
        *,
        drain_seconds: float = 10.0,
        chat_interval: float = CHAT_INTERVAL,
        group_interval: float = GROUP_INTERVAL,
        drafts: bool = True,
    ) -> None:
        self._bot = bot
        #: sendMessageDraft in private chats (falls back to edits where refused)
        self._drafts = drafts
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
        return utf16_len(text)

    def format(self, text: str) -> str:
        # one part's outbox row; ``parts`` is what the core calls for a whole reply
        return markdown.encode(markdown.render(text))

    def parts(self, text: str) -> list[str]:
        # rendered before it is split, so entities are cut with the text (markdown.py)
        return markdown.to_parts(text, self.max_message_length)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        rules = [PaceRule(f"chat:{target.chat_id}", self._chat_interval, BURST)]
        if target.chat_id.startswith("-"):
            # groups and supergroups have negative ids; private chats are the user's id
            rules.append(PaceRule(f"group:{target.chat_id}", self._group_interval, BURST))
        return rules

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        return await self._send_message(target, text, idempotency_key, approval=None)

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        return await self._send_message(target, text, idempotency_key, approval=approval_id)

    async def _send_message(
        self, target: ReplyTarget, text: str, idempotency_key: str, *, approval: str | None
    ) -> SendResult:
        # the outbox row is the encoded payload: text plus entities, never parse_mode
        text, entities = markdown.decode(text)
        kwargs = self._placement(target)
        if entities:
            kwargs["entities"] = [telegram.MessageEntity.de_json(e, None) for e in entities]
        if approval:
            # an approval card: the buttons carry only the opaque id
            kwargs["reply_markup"] = telegram.InlineKeyboardMarkup(
                [
                    [
                        telegram.InlineKeyboardButton(
                            "✅ Approve", callback_data=f"{APPROVAL_PREFIX}{approval}:y"
                        ),
                        telegram.InlineKeyboardButton(
                            "❌ Deny", callback_data=f"{APPROVAL_PREFIX}{approval}:n"
                        ),
                    ]
                ]
            )
        try:
            async with self._call():
                try:
                    message = await self._bot.send_message(
                        chat_id=target.chat_id, text=text, **kwargs
                    )
                except BadRequest as exc:
                    if "entities" not in kwargs or not _about_entities(exc):
                        raise
                    # refused before anything was posted: the same text without formatting
                    log.warning("telegram_entities_refused", error=exc.message)
                    del kwargs["entities"]
                    message = await self._bot.send_message(
                        chat_id=target.chat_id, text=text, **kwargs
                    )
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

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        # a picture as a photo (compressed, shown inline), anything else as a document; both
        # in the same topic / reply chain as a text reply
        kwargs = self._placement(target)
        if file.caption:
            kwargs["caption"] = _clip_utf16(file.caption, MAX_CAPTION_LENGTH)
        try:
            async with self._call():
                if file.is_image and len(file.data) <= MAX_PHOTO_BYTES:
                    message = await self._bot.send_photo(
                        chat_id=target.chat_id, photo=file.data, filename=file.name, **kwargs
                    )
                else:
                    message = await self._bot.send_document(
                        chat_id=target.chat_id, document=file.data, filename=file.name, **kwargs
                    )
        except TelegramError as exc:
            error = translate_error(exc)
            log.warning(
                "telegram_upload_failed",
                chat_id=target.chat_id,
                thread_id=target.thread_id,
                idempotency_key=idempotency_key,
                error=str(error),
                permanent=error.permanent,
            )
            raise error from exc
        return SendResult(platform_message_id=str(message.message_id))

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """editMessageText without a keyboard: the buttons go, the decision shows."""
        kwargs: dict[str, Any] = {}
        business = target.extra.get("business_connection_id")
        if business:
            kwargs["business_connection_id"] = business
        try:
            async with self._call():
                await self._bot.edit_message_text(
                    text=text,
                    chat_id=target.chat_id,
                    message_id=_int(platform_message_id, "message_id"),
                    **kwargs,
                )
        except BadRequest as exc:
            if "not modified" in exc.message:
                return  # retired before (a retry after a lost answer)
            raise translate_error(exc) from exc
        except TelegramError as exc:
            raise translate_error(exc) from exc

    # --- streaming previews ---------------------------------------------------

    #: editMessageText about once a second per message (the chat's pacing still applies)
    preview_interval = 1.0

    def drafts_for(self, target: ReplyTarget) -> bool:
        """sendMessageDraft (Bot API 9.3) is for private chats: positive chat ids, not a
        business connection or a channel's direct messages."""
        return (
            self._drafts
            and not target.chat_id.startswith("-")
            and not target.extra.get("business_connection_id")
            and "direct_messages_topic_id" not in target.extra
        )

    async def send_draft(self, target: ReplyTarget, draft_id: int, text: str) -> None:
        text, entities = markdown.decode(text)
        kwargs: dict[str, Any] = {}
        if target.thread_id is not None:
            kwargs["message_thread_id"] = _int(target.thread_id, "thread_id")
        if entities:
            kwargs["entities"] = [telegram.MessageEntity.de_json(e, None) for e in entities]
        try:
            async with self._call():
                await self._bot.send_message_draft(
                    chat_id=_int(target.chat_id, "chat_id"),
                    draft_id=draft_id,
                    text=text,
                    **kwargs,
                )
        except TelegramError as exc:
            raise translate_error(exc) from exc

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        text, entities = markdown.decode(text)
        kwargs = self._placement(target)
        if entities:
            kwargs["entities"] = [telegram.MessageEntity.de_json(e, None) for e in entities]
        try:
            async with self._call():
                message = await self._bot.send_message(chat_id=target.chat_id, text=text, **kwargs)
        except TelegramError as exc:
            raise translate_error(exc) from exc
        return str(message.message_id)

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        text, entities = markdown.decode(text)
        kwargs: dict[str, Any] = {}
        business = target.extra.get("business_connection_id")
        if business:
            kwargs["business_connection_id"] = business
        if entities:
            kwargs["entities"] = [telegram.MessageEntity.de_json(e, None) for e in entities]
        try:
            async with self._call():
                try:
                    await self._bot.edit_message_text(
                        text=text,
                        chat_id=target.chat_id,
                        message_id=_int(message_id, "message_id"),
                        **kwargs,
                    )
                except BadRequest as exc:
                    if "entities" not in kwargs or not _about_entities(exc):
                        raise
                    del kwargs["entities"]
                    await self._bot.edit_message_text(
                        text=text,
                        chat_id=target.chat_id,
                        message_id=_int(message_id, "message_id"),
                        **kwargs,
                    )
        except BadRequest as exc:
            if "not modified" in exc.message:
                return  # the same text again (a retried final edit): done
            raise translate_error(exc) from exc
        except TelegramError as exc:
            raise translate_error(exc) from exc

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        try:
            async with self._call():
                await self._bot.delete_message(
                    chat_id=target.chat_id, message_id=_int(message_id, "message_id")
                )
        except BadRequest as exc:
            if "not found" in exc.message:
                return  # deleted already
            raise translate_error(exc) from exc
        except TelegramError as exc:
            raise translate_error(exc) from exc

    # --- an earlier answer changed (gateway.core.ports.MessageEditing): an edited
    # question's answer written again in place, a deleted question's answer retracted

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        await self.edit_preview(target, message_id, text, final=True)

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        await self.delete_preview(target, message_id)

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        """getFile, then the download (knowledge base); the Bot API's own limit
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

    async def clear_typing(self, target: ReplyTarget) -> None:
        # The Bot API cannot cancel a chat action: the bot's next message ends it, and it
        # expires within 5 s once the heartbeat stops.
        return None

    def _placement(self, target: ReplyTarget) -> dict[str, Any]:
        """Where a message or an upload goes: the routing plus the reply and DM topic."""
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
        return kwargs

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
