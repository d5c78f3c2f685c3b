"""Raw delivery: ``PUT /rooms/{room}/send/m.room.message/{txnId}``.

Idempotent: the core's ``idempotency_key`` is the transaction id; the homeserver answers a
retry with the same transaction id (same access token) with the event it already made
(Synapse keeps them 30 minutes). Markdown goes as ``org.matrix.custom.html`` beside the plain
``body``. A reply in a thread carries the ``m.thread`` relation (with the reply fallback to
the message it answers); edits are ``m.replace`` events, deletions redactions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from markdown_it import MarkdownIt

from adapters.matrix.api import MatrixApi, MatrixApiError
from adapters.matrix.extract import PLATFORM
from gateway.core.attachments import FileFetchError, FileTooLarge
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule, SendResult
from gateway.core.text import format_parts

log = structlog.get_logger(__name__)

#: an event is at most 65,536 bytes as JSON; a part of this many UTF-8 bytes stays under it
#: with its HTML (escaping can make it up to 4x longer: ``<`` -> ``&lt;``) and the envelope
MAX_PART_BYTES = 12000

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")

APPROVE_TEXT = "✅"
DENY_TEXT = "❌"


def html_of(markdown: str) -> str:
    """The agent's Markdown as Matrix HTML (raw HTML in it is escaped, never passed on)."""
    return str(_markdown.render(markdown)).strip()


def translate_error(exc: MatrixApiError) -> DeliveryError:
    """Every failure of a send becomes one ``DeliveryError``, here and only here."""
    detail = str(exc)
    if exc.status == 429 or exc.errcode == "M_LIMIT_EXCEEDED":
        return DeliveryError(detail, retry_after=exc.retry_after or 1.0)
    if exc.status == 0:
        # unreachable or cut off: the transaction id makes a retry safe
        return DeliveryError(detail, ambiguous=True)
    if 400 <= exc.status < 500 and exc.status != 408:
        # M_FORBIDDEN (not in the room), M_NOT_FOUND, M_TOO_LARGE, a revoked token
        return DeliveryError(detail, permanent=True)
    return DeliveryError(detail, ambiguous=True)


def relates(target: ReplyTarget) -> dict[str, Any]:
    """The relation that puts an event into the target's thread (nothing at the top level)."""
    if not target.thread_id:
        return {}
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": target.thread_id,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": target.reply_to_message_id or target.thread_id},
        }
    }


def text_content(markdown: str) -> dict[str, Any]:
    return {
        "msgtype": "m.text",
        "body": markdown,
        "format": "org.matrix.custom.html",
        "formatted_body": html_of(markdown),
    }


class MatrixTransport:
    platform = PLATFORM
    max_message_length = MAX_PART_BYTES
    idempotent = True
    #: Synapse remembers a transaction id for 30 minutes; a resend after that could post twice
    resend_window: float | None = 25 * 60.0
    #: Element shows "typing" for the timeout we give (10 s); renewed well before it ends
    typing_interval = 5.0
    preview_interval = 1.0

    def __init__(self, api: MatrixApi, *, scope: str, messages_per_second: float = 0.2) -> None:
        self._api = api
        self._scope = scope
        self._account_interval = 1.0 / messages_per_second
        #: the bot's user id, once the adapter knows it (typing needs it)
        self.user_id: str | None = None

    def measure(self, text: str) -> int:
        return len(text.encode("utf-8", "surrogatepass"))

    def format(self, text: str) -> str:
        # parts stay Markdown: ``send`` sends each with its HTML rendering
        return text

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        # Synapse's rc_message limits an account (by default 0.2 messages a second with a
        # burst of 10): the account's sends stay under the configured rate, one room calm
        return [
            PaceRule(f"room:{target.chat_id}", 0.5, 5),
            PaceRule(f"account:{self._scope}", self._account_interval, 10),
        ]

    async def _put(
        self, target: ReplyTarget, content: Mapping[str, Any], txn_id: str, kind: str = ""
    ) -> str:
        try:
            return await self._api.send(target.chat_id, kind or "m.room.message", content, txn_id)
        except MatrixApiError as exc:
            error = translate_error(exc)
            log.warning(
                "matrix_send_failed",
                room_id=target.chat_id,
                thread=target.thread_id,
                permanent=error.permanent,
                retry_after=error.retry_after,
                error=str(error),
            )
            raise error from exc

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        content = {**text_content(text), **relates(target)}
        return SendResult(platform_message_id=await self._put(target, content, idempotency_key))

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        """The card's text; it is decided by reacting to it (``m.reaction``)."""
        text += f"\n\nReact with {APPROVE_TEXT} to approve or {DENY_TEXT} to deny."
        return await self.send(target, text, idempotency_key=idempotency_key)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        await self.edit_preview(target, platform_message_id, text)

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        try:
            url = await self._api.upload(file.name, file.mime_type, file.data)
        except MatrixApiError as exc:
            raise translate_error(exc) from exc
        content: dict[str, Any] = {
            "msgtype": "m.image" if file.is_image else "m.file",
            "body": file.caption or file.name,
            "filename": file.name,
            "url": url,
            "info": {"mimetype": file.mime_type, "size": len(file.data)},
            **relates(target),
        }
        return SendResult(platform_message_id=await self._put(target, content, idempotency_key))

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        if not attachment.file_id:
            raise FileFetchError(f"Matrix gave no address for {attachment.name or 'a file'}")
        try:
            return await self._api.download(attachment.file_id, max_bytes=max_bytes)
        except MatrixApiError as exc:
            name = attachment.name or "the file"
            if exc.errcode == "M_TOO_LARGE":
                raise FileTooLarge(f"{name} is larger than {max_bytes} bytes") from exc
            raise FileFetchError(f"could not fetch {name}: {exc}") from exc

    # --- streaming previews: a message, edited with m.replace ------------------------------

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        content = {**text_content(text), **relates(target)}
        return await self._put(target, content, f"gw-preview-{uuid.uuid4().hex}")

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        content = {
            **text_content(f"* {text}"),
            "m.new_content": text_content(text),
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
        }
        await self._put(target, content, f"gw-edit-{uuid.uuid4().hex}")

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        try:
            await self._api.redact(target.chat_id, message_id, f"gw-redact-{uuid.uuid4().hex}")
        except MatrixApiError as exc:
            if exc.status == 404:
                return
            raise translate_error(exc) from exc

    # --- an earlier answer changed (gateway.core.ports.MessageEditing): an edited
    # question's answer written again in place (m.replace), a deleted one's redacted

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        await self.edit_preview(target, message_id, text, final=True)

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        await self.delete_preview(target, message_id)

    async def notice(self, room_id: str, text: str, *, txn_id: str) -> None:
        """A plain ``m.notice`` (the encrypted room's one notice)."""
        content = {"msgtype": "m.notice", "body": text}
        target = ReplyTarget(platform=PLATFORM, scope=self._scope, chat_id=room_id)
        await self._put(target, content, txn_id)

    async def typing(self, target: ReplyTarget) -> None:
        if self.user_id is None:
            return
        try:
            await self._api.typing(target.chat_id, self.user_id, on=True)
        except MatrixApiError:
            log.debug("matrix_typing_failed", exc_info=True)

    async def clear_typing(self, target: ReplyTarget) -> None:
        if self.user_id is None:
            return
        try:
            await self._api.typing(target.chat_id, self.user_id, on=False)
        except MatrixApiError:
            log.debug("matrix_typing_failed", exc_info=True)
