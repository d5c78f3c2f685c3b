"""Raw delivery of one already-split part: ``POST /api/v4/posts``.

Idempotent: the core's deterministic ``idempotency_key`` is sent as ``pending_post_id``;
the server returns the already-created post for a ``pending_post_id`` seen within 30 s
(``deduplicateCreatePost``, platforms.md §3.2), so a retry after a timeout does not double-post.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
import structlog

from adapters.mattermost.actions import card_attachments
from adapters.mattermost.api import MattermostApi, MattermostApiError
from adapters.mattermost.extract import APPROVE_EMOJI_TEXT, DENY_EMOJI_TEXT, PLATFORM
from gateway.core.attachments import FileFetchError
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule, SendResult
from gateway.core.text import format_parts

log = structlog.get_logger(__name__)

#: server model/post.go: PostMessageMaxRunesV2 = 65535 / 4 (runes = code points = len())
MAX_MESSAGE_RUNES = 16383

#: the stored root is unusable (a reply, gone, or in another channel): never retried
_ROOT_ERRORS = frozenset(
    {
        "api.post.create_post.root_id.app_error",
        "api.post.create_post.channel_root_id.app_error",
    }
)
#: the first request with this pending_post_id is still being saved: retry shortly
_DEDUPE_PENDING = "api.post.deduplicate_create_post.pending"

TypingSender = Callable[[str, dict[str, Any]], Awaitable[bool]]


def translate_error(exc: Exception) -> DeliveryError:
    """Every failure of a send becomes one ``DeliveryError``, here and only here."""
    if isinstance(exc, MattermostApiError):
        detail = f"mattermost {exc.status} {exc.error_id}: {exc.message}"
        if exc.status == 429:
            return DeliveryError(detail, retry_after=exc.retry_after or 1.0)
        if exc.error_id == _DEDUPE_PENDING:
            return DeliveryError(detail, retry_after=1.0)
        if exc.error_id in _ROOT_ERRORS:
            # root_id is a reply or in another channel: the stored target is wrong for good
            # (the channel_root_id variant is a 500 on current servers, still permanent)
            return DeliveryError(detail, permanent=True)
        if 400 <= exc.status < 500 and exc.status != 408:
            # 400 invalid post, 401 token revoked, 403 not a member / read-only, 404 channel
            # gone, 413 too large: retrying the same request cannot succeed
            return DeliveryError(detail, permanent=True)
        return DeliveryError(detail)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return DeliveryError(f"mattermost unreachable: {exc!r}")
    if isinstance(exc, httpx.TransportError):
        # the request may have been processed: ambiguous, but safe to retry within 30 s
        # thanks to pending_post_id (transport.idempotent)
        return DeliveryError(f"mattermost request failed: {exc!r}", ambiguous=True)
    # e.g. an undecodable 2xx body: the post may exist; pending_post_id makes a retry safe
    return DeliveryError(f"mattermost send failed: {exc!r}", ambiguous=True)


class MattermostTransport:
    platform = PLATFORM
    max_message_length = MAX_MESSAGE_RUNES
    idempotent = True
    #: the server remembers a pending_post_id for 30 s only (platforms.md §3.2,
    #: pendingPostIDsCacheTTL): a resend later than that could post twice, so the core
    #: treats a send that may have landed longer ago as ambiguous instead of resending it
    resend_window: float | None = 30.0
    #: clients show user_typing for a few seconds; renewed like Telegram's chat action
    typing_interval = 4.0

    def __init__(
        self,
        api: MattermostApi,
        *,
        scope: str,
        actions_url: str | None = None,
        actions_key: bytes | None = None,
    ) -> None:
        self._api = api
        self._scope = scope
        #: where approval buttons post back (``MATTERMOST_ACTIONS_URL``); None: reactions only
        self.actions_url = actions_url
        self._actions_key = actions_key
        self._typing: TypingSender | None = None
        self._closed = False
        self._inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()

    async def close(self, *, timeout: float = 10.0) -> None:
        """Let sends already on the wire finish (bounded), then close the HTTP client.
        Later sends fail transiently, so their deliveries stay pending for the next start."""
        self._closed = True
        self._typing = None
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            log.warning("mattermost_sends_still_in_flight", count=self._inflight)
        await self._api.aclose()

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        """A file attached to a post (knowledge base)."""
        if not attachment.file_id:
            raise FileFetchError(f"Mattermost gave no file id for {attachment.name or 'a file'}")
        return await self._api.download(
            attachment.file_id, max_bytes=max_bytes, name=attachment.name
        )

    def attach_typing(self, sender: TypingSender | None) -> None:
        """The adapter plugs in its websocket's ``send_action`` once it runs."""
        self._typing = sender

    def measure(self, text: str) -> int:
        # the server counts runes (utf8.RuneCountInString) = Python code points
        return len(text)

    def format(self, text: str) -> str:
        # Mattermost renders Markdown natively
        return text

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        # Mattermost's optional rate limiter defaults to 10 requests per second per client
        # address with a burst of 100 (RateLimitSettings PerSec, MaxBurst; platforms.md §3.3):
        # the whole server stays under it with half the burst (the rest is left for the
        # gateway's other calls: reconciliation, typing, files), one channel stays calm.
        return [
            PaceRule(f"channel:{target.chat_id}", 0.2, 5),
            PaceRule(f"server:{self._scope}", 0.1, 50),
        ]

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        return await self._counted_send(target, text, idempotency_key, approval_id=None)

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        return await self._counted_send(target, text, idempotency_key, approval_id=approval_id)

    async def _counted_send(
        self, target: ReplyTarget, text: str, idempotency_key: str, *, approval_id: str | None
    ) -> SendResult:
        if self._closed:
            raise DeliveryError("mattermost adapter stopped")
        self._inflight += 1
        self._drained.clear()
        try:
            return await self._send(target, text, idempotency_key, approval_id=approval_id)
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    async def _send(
        self,
        target: ReplyTarget,
        text: str,
        idempotency_key: str,
        *,
        file_ids: list[str] | None = None,
        approval_id: str | None = None,
    ) -> SendResult:
        buttons = bool(approval_id) and self._buttons
        if approval_id:
            # an approval card: decided by reacting to this very post, or by its
            # buttons when the server can reach the gateway (``adapters.mattermost.actions``)
            text += "\n\n" + ("Press Approve or Deny. " if buttons else "")
            text += f"React with {APPROVE_EMOJI_TEXT} to approve or {DENY_EMOJI_TEXT} to deny."
        body: dict[str, Any] = {
            "channel_id": target.chat_id,
            # the stored root id; "" posts at the top level (a DM answer)
            "root_id": target.thread_id or "",
            "message": text,
            "pending_post_id": idempotency_key,
        }
        if buttons:
            assert self.actions_url is not None and self._actions_key is not None
            assert approval_id is not None
            body["props"] = {
                "attachments": card_attachments(
                    url=self.actions_url,
                    key=self._actions_key,
                    approval_id=approval_id,
                    channel_id=target.chat_id,
                )
            }
        if file_ids:
            body["file_ids"] = file_ids
        try:
            post = await self._api.create_post(body)
        except (MattermostApiError, httpx.HTTPError, ValueError) as exc:
            # ValueError: a 2xx whose body is not JSON (a proxy page?): it may have posted
            error = translate_error(exc)
            log.warning(
                "mattermost_send_failed",
                channel_id=target.chat_id,
                root_id=target.thread_id,
                permanent=error.permanent,
                retry_after=error.retry_after,
                error=str(error),
            )
            raise error from exc
        post_id = post.get("id")
        return SendResult(platform_message_id=post_id if isinstance(post_id, str) else None)

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        if self._closed:
            raise DeliveryError("mattermost adapter stopped")
        self._inflight += 1
        self._drained.clear()
        try:
            try:
                # an upload that is never posted is an orphan, invisible; the post carries
                # the pending_post_id, so a retried send cannot post the file twice
                file_id = await self._api.upload_file(target.chat_id, file.name, file.data)
            except (MattermostApiError, httpx.HTTPError, ValueError) as exc:
                raise translate_error(exc) from exc
            return await self._send(target, file.caption or "", idempotency_key, file_ids=[file_id])
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    @property
    def _buttons(self) -> bool:
        return self.actions_url is not None and self._actions_key is not None

    # --- streaming previews: a post, edited with PUT /posts/{id}/patch ---------

    preview_interval = 1.0

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        if self._closed:
            raise DeliveryError("mattermost adapter stopped")
        body = {
            "channel_id": target.chat_id,
            "root_id": target.thread_id or "",
            "message": text,
            "pending_post_id": f"gw-preview-{uuid.uuid4().hex}",
        }
        try:
            post = await self._api.create_post(body)
        except (MattermostApiError, httpx.HTTPError, ValueError) as exc:
            raise translate_error(exc) from exc
        post_id = post.get("id")
        if not isinstance(post_id, str):
            raise DeliveryError("mattermost: the post has no id", ambiguous=True)
        return post_id

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        try:
            await self._api.patch_post(message_id, text)
        except (MattermostApiError, httpx.HTTPError, ValueError) as exc:
            raise translate_error(exc) from exc

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        try:
            await self._api.delete_post(message_id)
        except MattermostApiError as exc:
            if exc.status == 404:
                return  # gone already
            raise translate_error(exc) from exc
        except (httpx.HTTPError, ValueError) as exc:
            raise translate_error(exc) from exc

    # --- an earlier answer changed (gateway.core.ports.MessageEditing): an edited
    # question's answer written again in place, a deleted question's answer retracted

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        await self.edit_preview(target, message_id, text, final=True)

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        await self.delete_preview(target, message_id)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """Edit the card to show the decision and drop its buttons (reactions cannot be taken
        away). ``props`` replaces the card's props, so the attachment with the buttons goes."""
        try:
            await self._api.patch_post(
                platform_message_id, text, props={"attachments": []} if self._buttons else None
            )
        except (MattermostApiError, httpx.HTTPError, ValueError) as exc:
            raise translate_error(exc) from exc

    async def typing(self, target: ReplyTarget) -> None:
        sender = self._typing
        if sender is None:
            return
        try:
            await sender(
                "user_typing", {"channel_id": target.chat_id, "parent_id": target.thread_id or ""}
            )
        except Exception:  # broad: a typing indicator is cosmetic, never fail a turn for it
            log.debug("mattermost_typing_failed", exc_info=True)

    async def clear_typing(self, target: ReplyTarget) -> None:
        # Mattermost has no "stopped typing" action: clients drop the indicator a few
        # seconds after the last user_typing, or when the post arrives.
        return None
