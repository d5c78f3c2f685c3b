"""Slack outbound: the raw ``chat.postMessage`` of one already-split part.

Policy (retries, backoff, splitting, pacing) lives in the core; this module only sends once and
translates every failure into ``DeliveryError`` in one function (``translate_error``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.blocks import answer_blocks, code_blocks
from adapters.slack.mrkdwn import markdown_to_mrkdwn
from adapters.slack.streams import NativeStreams, error_code
from gateway.core.attachments import FileFetchError, download
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget
from gateway.core.errors import DeliveryError
from gateway.core.ports import PaceRule, SendResult
from gateway.core.retry_after import retry_after_or_default
from gateway.core.text import format_parts

log = structlog.get_logger(__name__)

PLATFORM = "slack"

#: Slack truncates past 40,000 characters and recommends staying under 4,000 (platforms.md
#: §2.8); 3,900 leaves room for the escaping ``format`` adds.
MAX_MESSAGE_LENGTH = 3900

#: ``ok: false`` errors a retry cannot fix (the channel, membership or token is wrong).
PERMANENT_ERRORS = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "is_archived",
        "msg_too_long",
        "no_text",
        "restricted_action",
        "thread_not_found",
        "invalid_thread_ts",
        "invalid_arguments",
        "invalid_blocks",
        "ekm_access_denied",
        "team_access_not_granted",
    }
)
#: Slack's own words for these: "It's possible some aspect of the operation succeeded before
#: the error was raised" — the post may exist, so a blind retry could double-post.
AMBIGUOUS_ERRORS = frozenset({"internal_error", "fatal_error", "request_timeout"})
#: ``assistant.threads.setStatus`` answers meaning "not for this app/token": stop trying
STATUS_UNAVAILABLE = frozenset(
    {
        "missing_scope",
        "not_allowed_token_type",
        "unknown_method",
        "method_deprecated",
        "invalid_auth",
        "not_authed",
        "feature_not_enabled",
        "access_denied",
    }
)
THINKING_STATUS = "is thinking…"
#: the agent session of a thread (docs.slack.dev/ai/agent-sessions) while a turn runs there:
#: Slack shows its own stop button, whose press arrives as ``agent_session_stopped``; and
#: once the turn is over (Slack leaves that to the app)
SESSION_WORKING = "processing"
SESSION_DONE = "active"
#: agents.sessions.setStatus's warning when the app does not take ``agent_session_stopped``:
#: Slack then shows a loading indicator without a stop button
NO_STOP_EVENT = "missing_agent_session_stopped_event_subscription"
RATE_LIMIT_ERRORS = frozenset({"ratelimited", "rate_limited"})


def make_web_client(
    *, token: str, base_url: str, timeout: int = 10, session: aiohttp.ClientSession | None = None
) -> AsyncWebClient:
    """The one Web API client: no retry handlers, because slack_sdk's default connection-error
    retry could re-send a ``chat.postMessage`` that already landed (architecture invariant 3)."""
    return AsyncWebClient(
        token=token, base_url=base_url, timeout=timeout, retry_handlers=[], session=session
    )


def _retry_after(headers: Mapping[str, Any] | None) -> float:
    # slack_sdk hands the headers over as a plain dict or aiohttp's case-insensitive one
    value = None if headers is None else headers.get("Retry-After", headers.get("retry-after"))
    return retry_after_or_default(None if value is None else str(value))


def translate_error(exc: BaseException) -> DeliveryError:
    """Every send failure, once, as a ``DeliveryError`` carrying what the core needs."""
    if isinstance(exc, SlackApiError):
        response = exc.response
        status = getattr(response, "status_code", None)
        code = error_code(exc)
        error = code if code is not None else f"http_{status}"
        if status == 429 or error in RATE_LIMIT_ERRORS:
            return DeliveryError(
                f"slack {error}",
                retry_after=_retry_after(getattr(response, "headers", None)),
            )
        if error in AMBIGUOUS_ERRORS:
            return DeliveryError(f"slack {error}", ambiguous=True)
        if isinstance(status, int) and status >= 500:
            return DeliveryError(f"slack {error} (HTTP {status})")
        if error in PERMANENT_ERRORS or status == 200:
            # An ``ok: false`` answer is a decision about this request; resending it won't
            # change the answer.
            return DeliveryError(f"slack {error}", permanent=True)
        return DeliveryError(f"slack {error} (HTTP {status})")
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        # The request left; Slack may have posted it. The core records it as ambiguous.
        return DeliveryError("slack request timed out", ambiguous=True)
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Never connected: nothing was posted, a retry is safe.
        return DeliveryError(f"slack unreachable: {exc.__class__.__name__}")
    if isinstance(exc, aiohttp.ClientError):
        # Disconnected mid-request (ServerDisconnectedError, payload errors): may have landed.
        return DeliveryError(f"slack connection failed: {exc.__class__.__name__}", ambiguous=True)
    return DeliveryError(f"slack send failed: {exc.__class__.__name__}", ambiguous=True)


#: the approval buttons' action ids (the value is the request's opaque id)
APPROVE_ACTION = "gateway_approval_approve"
DENY_ACTION = "gateway_approval_deny"


def approval_blocks(text: str, approval_id: str) -> list[dict[str, Any]]:
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {
            "type": "actions",
            "block_id": "approval",
            "elements": [
                {
                    "type": "button",
                    "action_id": APPROVE_ACTION,
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "value": approval_id,
                },
                {
                    "type": "button",
                    "action_id": DENY_ACTION,
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Deny"},
                    "value": approval_id,
                },
            ],
        },
    ]


@dataclass(slots=True)
class _OptionalMethod:
    """A Slack method this app may not be allowed (a scope, a plan, a token type): once Slack
    refuses it for the app (``STATUS_UNAVAILABLE``), it is not called again; any other failure
    only costs that call. Logged under the two event names given."""

    unavailable_event: str
    failed_event: str
    available: bool = True

    async def call(self, call: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse | None:
        try:
            return await call
        except SlackApiError as exc:
            error = error_code(exc)
            if error in STATUS_UNAVAILABLE:
                self.available = False
                log.info(self.unavailable_event, error=error)
            else:
                log.debug(self.failed_event, error=error)
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.debug(self.failed_event, error=type(exc).__name__)
        return None


class SlackTransport:
    """``Transport`` for Slack. ``send`` posts once; it never retries by itself."""

    platform = PLATFORM
    max_message_length = MAX_MESSAGE_LENGTH
    #: chat.postMessage has no idempotency key: a retry after an ambiguous failure can
    #: double-post, so the core must not retry ambiguous sends blindly.
    idempotent = False
    resend_window: float | None = None
    #: the thread status lasts 2 minutes without a reply; renewed well before that
    typing_interval = 60.0

    def __init__(self, client: AsyncWebClient) -> None:
        self.client = client
        #: answers streamed with Slack's own streaming methods, where Slack allows them
        self.streams = NativeStreams(client, translate_error)
        #: "is thinking…" under a thread, and the thread's agent session (the stop button)
        self._status = _OptionalMethod(
            "slack_thread_status_unavailable", "slack_thread_status_failed"
        )
        self._status_shown: set[tuple[str, str]] = set()
        self._sessions = _OptionalMethod(
            "slack_agent_sessions_unavailable", "slack_agent_session_failed"
        )
        self._sessions_working: set[tuple[str, str]] = set()
        self._warned_stop = False

    def measure(self, text: str) -> int:
        # Slack's documented limits count characters (code points), not bytes or UTF-16 units.
        return len(text)

    def format(self, text: str) -> str:
        return markdown_to_mrkdwn(text)

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        # chat.postMessage: one message per second per channel, "short bursts >1 allowed"
        # (platforms.md §2.8); other channels are not held back.
        return [PaceRule(f"channel:{target.scope}:{target.chat_id}", 1.0, 3)]

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        # code fences become rich-text preformatted blocks, the feedback buttons go under the
        # text; ``text`` stays the fallback
        return await self._send_blocks(target, text, answer_blocks(text), idempotency_key)

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        # an approval card: buttons carrying only the opaque id; ``text`` stays the fallback
        blocks = approval_blocks(text, approval_id)
        return await self._send_blocks(target, text, blocks, idempotency_key)

    async def _send_blocks(
        self,
        target: ReplyTarget,
        text: str,
        blocks: list[dict[str, Any]] | None,
        idempotency_key: str,
    ) -> SendResult:
        try:
            try:
                response = await self._post(target, text, blocks, idempotency_key)
            except SlackApiError as exc:
                if blocks is None or error_code(exc) != "invalid_blocks":
                    raise
                # refused before anything was posted: the text alone carries the message
                log.warning("slack_blocks_refused", channel=target.chat_id)
                response = await self._post(target, text, None, idempotency_key)
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            raise translate_error(exc) from exc
        ts = response.get("ts")
        return SendResult(platform_message_id=ts if isinstance(ts, str) else None)

    async def _post(
        self,
        target: ReplyTarget,
        text: str,
        blocks: list[dict[str, Any]] | None,
        idempotency_key: str,
    ) -> AsyncSlackResponse:
        extra: dict[str, Any] = {} if blocks is None else {"blocks": blocks}
        return await self.client.chat_postMessage(
            channel=target.chat_id,
            # Always the ROOT ts computed at ingest (never a reply's own ts); None = post
            # in the channel/DM itself.
            thread_ts=target.thread_id,
            text=text,
            # Recorded with the post so an ambiguous send can be reconciled by reading the
            # thread (message metadata survives in conversations.replies).
            metadata={
                "event_type": "gateway_reply",
                "event_payload": {"idempotency_key": idempotency_key},
            },
            **extra,
        )

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        # files.uploadV2 (getUploadURLExternal, the upload, completeUploadExternal) shares the
        # file into the stored thread; the caption is its initial comment
        try:
            response = await self.client.files_upload_v2(
                channel=target.chat_id,
                thread_ts=target.thread_id,
                content=file.data,
                filename=file.name,
                title=file.name,
                initial_comment=file.caption,
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            raise translate_error(exc) from exc
        except SlackRequestError as exc:
            # the upload step itself failed (not 200): nothing was shared yet
            raise DeliveryError(f"slack upload failed: {exc}") from exc
        uploaded = response.get("file")
        file_id = uploaded.get("id") if isinstance(uploaded, Mapping) else None
        return SendResult(platform_message_id=file_id if isinstance(file_id, str) else None)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """chat.update with the decision and no actions block: the buttons are gone."""
        try:
            await self.client.chat_update(
                channel=target.chat_id,
                ts=platform_message_id,
                text=text,
                blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            raise translate_error(exc) from exc

    # --- streaming previews ---------------------------------------------------
    # Where Slack allows it, a preview is a native stream (chat.startStream, grown with
    # chat.appendStream; ``streams.py``); elsewhere, or when Slack refuses, a posted message
    # edited with chat.update (about one edit a second per message). Either way the delivery
    # of the answer edits that one message into the final text, with the feedback buttons.

    preview_interval = 1.0

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        if self.streams.allowed(target):
            ts = await self.streams.start(target, text)
            if ts is not None:
                return ts
        blocks = code_blocks(text)
        extra: dict[str, Any] = {} if blocks is None else {"blocks": blocks}
        try:
            response = await self.client.chat_postMessage(
                channel=target.chat_id, thread_ts=target.thread_id, text=text, **extra
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            raise translate_error(exc) from exc
        ts = response.get("ts")
        if not isinstance(ts, str):
            raise DeliveryError("slack: chat.postMessage gave no ts", ambiguous=True)
        self.streams.posted(ts)
        return ts

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        if not final and await self.streams.append(message_id, text):
            return
        # the final text, a rewritten one, or a preview by edits: a stream (ours, or one a
        # dead run left) is stopped first, then the message is edited
        await self.streams.stop(
            message_id, target.chat_id if self.streams.allowed(target) else None
        )
        blocks = answer_blocks(text) if final else code_blocks(text)
        try:
            await self.client.chat_update(
                channel=target.chat_id,
                ts=message_id,
                text=text,
                blocks=blocks if blocks is not None else [],
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            raise translate_error(exc) from exc

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        await self.streams.stop(message_id)
        try:
            await self.client.chat_delete(channel=target.chat_id, ts=message_id)
        except SlackApiError as exc:
            if error_code(exc) == "message_not_found":
                return
            raise translate_error(exc) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise translate_error(exc) from exc

    # --- an earlier answer changed (gateway.core.ports.MessageEditing): an edited
    # question's answer written again in place, a deleted question's answer retracted

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        await self.edit_preview(target, message_id, text, final=True)

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        await self.delete_preview(target, message_id)

    async def notify(self, target: ReplyTarget, user_id: str, text: str) -> None:
        """A notice only ``user_id`` sees, in the card's thread (chat.postEphemeral)."""
        try:
            await self.client.chat_postEphemeral(
                channel=target.chat_id, user=user_id, text=text, thread_ts=target.thread_id
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            log.info("slack_ephemeral_failed", error=str(translate_error(exc)))

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        """A shared file (knowledge base): ``url_private`` with the bot token, sent
        only to Slack's own hosts (or the configured API host, a local fake)."""
        import httpx

        url = attachment.url
        if not url:
            raise FileFetchError(f"Slack gave no download link for {attachment.name or 'a file'}")
        host = urlsplit(url).hostname or ""
        api_host = urlsplit(self.client.base_url).hostname or ""
        if not (host == "slack.com" or host.endswith(".slack.com") or host == api_host):
            raise FileFetchError(f"refusing to send the bot token to {host}")
        async with httpx.AsyncClient(timeout=60, follow_redirects=False) as http:
            return await download(
                http,
                url,
                max_bytes=max_bytes,
                name=attachment.name,
                headers={"Authorization": f"Bearer {self.client.token}"},
                refuse_html=attachment.mime_type != "text/html",
            )

    async def typing(self, target: ReplyTarget) -> None:
        # ``assistant.threads.setStatus`` (chat:write): "<app> is thinking…" under the thread,
        # removed by Slack after 2 min or when the app replies; and the thread's agent session
        # ``processing`` (``agents.sessions.setStatus``), which gives the person Slack's own
        # stop button while the turn runs. A thread is needed (both take a thread_ts); where
        # Slack refuses either method for this app, it is not tried again.
        if target.thread_id is None:
            return
        key = (target.chat_id, target.thread_id)
        if self._status.available:
            await _noted(self._status_shown, key, self._set_status(target, THINKING_STATUS))
        if self._sessions.available:
            await _noted(self._sessions_working, key, self._set_session(target, SESSION_WORKING))

    async def clear_typing(self, target: ReplyTarget) -> None:
        key = (target.chat_id, target.thread_id or "")
        if key in self._status_shown:
            self._status_shown.discard(key)
            await self._set_status(target, "")
        if key in self._sessions_working:
            # the turn is over (answered, failed or stopped): the stop button goes
            self._sessions_working.discard(key)
            await self._set_session(target, SESSION_DONE)

    async def _set_session(self, target: ReplyTarget, status: str) -> bool:
        response = await self._sessions.call(
            self.client.agents_sessions_setStatus(
                channel_id=target.chat_id, thread_ts=target.thread_id, status=status
            )
        )
        if response is None:
            return False
        warning = response.get("warning")
        if isinstance(warning, str) and NO_STOP_EVENT in warning and not self._warned_stop:
            self._warned_stop = True
            log.warning(
                "slack_stop_button_unavailable",
                hint="subscribe the app to the agent_session_stopped event",
            )
        return True

    async def _set_status(self, target: ReplyTarget, status: str) -> bool:
        response = await self._status.call(
            self.client.assistant_threads_setStatus(
                channel_id=target.chat_id, thread_ts=target.thread_id or "", status=status
            )
        )
        return response is not None


async def _noted(marks: set[tuple[str, str]], key: tuple[str, str], call: Awaitable[bool]) -> None:
    """Note ``key`` in ``marks`` (what ``clear_typing`` undoes) before ``call`` goes out: a
    turn that ends while it is on its way (the typing task cancelled in the await) still
    clears what Slack may already show. Forgotten again only when a first call was refused."""
    before = key in marks
    marks.add(key)
    if not await call and not before:
        marks.discard(key)
