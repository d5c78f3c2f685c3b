"""Delivery into Discord: ``POST /channels/{thread or channel}/messages``.

* Idempotent within a few minutes: the core's idempotency key, hashed to Discord's 25
  characters, is the message's ``nonce`` with ``enforce_nonce`` (a retry returns the message
  already created).
* A channel message's session is the thread on that message (``extract``): the first send
  into it finds no such channel (404, code 10003) and starts the thread on the message
  (``POST /channels/{channel}/messages/{message}/threads``; the thread's id is the
  message's), then sends again.
* A 429 is the core's: ``DeliveryError(retry_after=..., hold=...)`` closes the pace key of
  the channel (a route's limit) or of the whole bot (the global one) for that long, so the
  outbox's pacing makes every send under it wait, in every replica; typing indicators
  (cosmetic, not paced) pause for a global one too.
* Approval cards carry Approve / Deny buttons (message components) whose ``custom_id`` holds
  only the request's id; presses arrive as ``INTERACTION_CREATE`` (``adapter``).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import structlog

from adapters.discord.api import (
    THREAD_ALREADY_CREATED,
    UNKNOWN_CHANNEL,
    UNKNOWN_MESSAGE,
    DiscordApi,
    DiscordApiError,
)
from adapters.discord.extract import PLATFORM
from gateway.core.attachments import FileFetchError
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule, SendResult
from gateway.core.text import format_parts

log = structlog.get_logger(__name__)

#: a message's ``content`` is at most 2,000 characters
MAX_MESSAGE_LENGTH = 2000
#: the prefix of an approval button's ``custom_id``: ``gw:approve:<id>`` / ``gw:deny:<id>``
APPROVE_PREFIX = "gw:approve:"
DENY_PREFIX = "gw:deny:"
#: mentions in answers never ping anyone (an agent quoting ``@everyone``)
NO_PINGS: dict[str, Any] = {"parse": []}


#: the pace key of every request of the bot (Discord's global limit)
BOT_KEY = "bot"


def channel_key(channel_id: str) -> str:
    """The pace key of one channel's (or thread's) sends: its routes' limits."""
    return f"channel:{channel_id}"


def nonce_of(idempotency_key: str) -> str:
    """Discord's nonce is at most 25 characters: a digest of the core's key."""
    return hashlib.sha256(idempotency_key.encode()).hexdigest()[:25]


def buttons(approval_id: str) -> list[dict[str, Any]]:
    """One action row: Approve (green) and Deny (red)."""
    return [
        {
            "type": 1,
            "components": [
                {
                    "type": 2,
                    "style": 3,
                    "label": "Approve",
                    "custom_id": APPROVE_PREFIX + approval_id,
                },
                {"type": 2, "style": 4, "label": "Deny", "custom_id": DENY_PREFIX + approval_id},
            ],
        }
    ]


class DiscordTransport:
    platform = PLATFORM
    max_message_length = MAX_MESSAGE_LENGTH
    idempotent = True
    #: Discord keeps an enforced nonce for a few minutes (platforms.md "Discord")
    resend_window: float | None = 120.0
    #: the typing indicator lasts 10 s
    typing_interval = 8.0
    preview_interval = 1.0

    def __init__(self, api: DiscordApi) -> None:
        self._api = api
        self._closed = False
        #: monotonic time until which the bot's global rate limit holds (a global 429):
        #: typing indicators wait it out here, sends through the outbox's pacing
        self._global_until = 0.0
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    async def close(self, *, timeout: float = 10.0) -> None:
        self._closed = True
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            log.warning("discord_sends_still_in_flight", count=self._inflight)
        await self._api.aclose()

    # --- text ----------------------------------------------------------------------------

    def measure(self, text: str) -> int:
        return len(text)

    def format(self, text: str) -> str:
        # Discord renders Markdown itself (bold, italics, code, lists, headings, links)
        return text

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        # 5 messages per 5 s per channel, and about 50 requests a second for the bot: the
        # bot stays under the global limit with room for edits, typing and catch-up
        channel = target.thread_id or target.chat_id
        return [PaceRule(channel_key(channel), 1.0, 5), PaceRule(BOT_KEY, 0.025, 20)]

    # --- errors --------------------------------------------------------------------------

    def _translate(self, exc: Exception, channel: str) -> DeliveryError:
        if isinstance(exc, DiscordApiError):
            detail = f"discord {exc.status} {exc.code}: {exc.message}"
            if exc.status == 429:
                wait = exc.retry_after if exc.retry_after is not None else 1.0
                if exc.global_limit:
                    self._global_until = max(self._global_until, time.monotonic() + wait)
                    # the whole bot: every send of it waits (the outbox holds the key)
                    return DeliveryError(detail, retry_after=wait, hold=(BOT_KEY,))
                return DeliveryError(detail, retry_after=wait, hold=(channel_key(channel),))
            if 400 <= exc.status < 500 and exc.status != 408:
                # 400 invalid, 401 token revoked, 403 missing access, 404 channel gone
                return DeliveryError(detail, permanent=True)
            return DeliveryError(detail)
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return DeliveryError(f"discord unreachable: {exc!r}")
        if isinstance(exc, httpx.TransportError):
            # it may have been created: the enforced nonce makes a retry safe
            return DeliveryError(f"discord request failed: {exc!r}", ambiguous=True)
        return DeliveryError(f"discord send failed: {exc!r}", ambiguous=True)

    def _gate(self) -> None:
        if self._closed:
            raise DeliveryError("discord adapter stopped")

    # --- sends ---------------------------------------------------------------------------

    async def _post(
        self,
        target: ReplyTarget,
        body: dict[str, Any],
        *,
        files: list[tuple[str, tuple[str, bytes, str]]] | None = None,
    ) -> dict[str, Any]:
        """Post into the target's thread (or channel, or DM), starting the thread on its
        message first when it does not exist yet."""
        self._gate()
        channel = target.thread_id or target.chat_id
        self._inflight += 1
        self._drained.clear()
        try:
            try:
                return await self._api.create_message(channel, body, files=files)
            except DiscordApiError as exc:
                if not (
                    exc.status == 404 and exc.code == UNKNOWN_CHANNEL and self._startable(target)
                ):
                    raise
            assert target.thread_id is not None
            name = target.extra.get("thread_name") or "Conversation"
            try:
                await self._api.start_thread(target.chat_id, target.thread_id, name)
            except DiscordApiError as exc:
                if exc.code != THREAD_ALREADY_CREATED:
                    raise
            log.info(
                "discord_thread_started", channel_id=target.chat_id, thread_id=target.thread_id
            )
            return await self._api.create_message(channel, body, files=files)
        except (DiscordApiError, httpx.HTTPError, ValueError) as exc:
            error = self._translate(exc, channel)
            log.warning(
                "discord_send_failed",
                channel_id=target.chat_id,
                thread_id=target.thread_id,
                permanent=error.permanent,
                retry_after=error.retry_after,
                error=str(error),
            )
            raise error from exc
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    @staticmethod
    def _startable(target: ReplyTarget) -> bool:
        """The target's thread is one to start on a message (a channel message's session)."""
        return bool(target.thread_id) and target.thread_id != target.chat_id

    @staticmethod
    def _result(message: dict[str, Any]) -> SendResult:
        mid = message.get("id")
        return SendResult(platform_message_id=mid if isinstance(mid, str) else None)

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        body = {
            "content": text,
            "nonce": nonce_of(idempotency_key),
            "enforce_nonce": True,
            "allowed_mentions": NO_PINGS,
        }
        return self._result(await self._post(target, body))

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        body = {
            "content": text,
            "nonce": nonce_of(idempotency_key),
            "enforce_nonce": True,
            "allowed_mentions": NO_PINGS,
            "components": buttons(approval_id),
        }
        return self._result(await self._post(target, body))

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        body: dict[str, Any] = {
            "content": file.caption or "",
            "nonce": nonce_of(idempotency_key),
            "enforce_nonce": True,
            "allowed_mentions": NO_PINGS,
            "attachments": [{"id": 0, "filename": file.name}],
        }
        mime = file.mime_type or "application/octet-stream"
        files = [("files[0]", (file.name, file.data, mime))]
        return self._result(await self._post(target, body, files=files))

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        if not attachment.url:
            raise FileFetchError(f"Discord gave no URL for {attachment.name or 'a file'}")
        try:
            return await self._api.download(attachment.url, max_bytes=max_bytes)
        except (DiscordApiError, httpx.HTTPError, ValueError) as exc:
            raise FileFetchError(f"could not fetch {attachment.name or 'a file'}: {exc}") from exc

    # --- previews: a message edited as the answer grows ---------------------------------

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        body = {
            "content": text,
            "nonce": nonce_of(f"gw-preview-{uuid.uuid4().hex}"),
            "allowed_mentions": NO_PINGS,
        }
        message = await self._post(target, body)
        mid = message.get("id")
        if not isinstance(mid, str):
            raise DeliveryError("discord: the message has no id", ambiguous=True)
        return mid

    async def _edit(self, target: ReplyTarget, message_id: str, body: dict[str, Any]) -> None:
        self._gate()
        channel = target.thread_id or target.chat_id
        try:
            await self._api.edit_message(channel, message_id, body)
        except (DiscordApiError, httpx.HTTPError, ValueError) as exc:
            raise self._translate(exc, channel) from exc

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        await self._edit(target, message_id, {"content": text, "allowed_mentions": NO_PINGS})

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        self._gate()
        channel = target.thread_id or target.chat_id
        try:
            await self._api.delete_message(channel, message_id)
        except DiscordApiError as exc:
            if exc.status == 404 and exc.code in (UNKNOWN_MESSAGE, UNKNOWN_CHANNEL):
                return  # gone already
            raise self._translate(exc, channel) from exc
        except (httpx.HTTPError, ValueError) as exc:
            raise self._translate(exc, channel) from exc

    # --- an earlier answer changed (gateway.core.ports.MessageEditing): an edited
    # question's answer written again in place, a deleted one's answer deleted

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        await self.edit_preview(target, message_id, text, final=True)

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        await self.delete_preview(target, message_id)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """The card shows the decision and loses its buttons."""
        await self._edit(target, platform_message_id, {"content": text, "components": []})

    # --- typing --------------------------------------------------------------------------

    async def typing(self, target: ReplyTarget) -> None:
        if self._closed or time.monotonic() < self._global_until:
            return
        try:
            await self._api.typing(target.thread_id or target.chat_id)
        except Exception:  # broad: a typing indicator is cosmetic, never fail a turn for it
            log.debug("discord_typing_failed", exc_info=True)

    async def clear_typing(self, target: ReplyTarget) -> None:
        # the indicator ends with the message, or after 10 s
        return None
