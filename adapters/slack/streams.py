"""Slack's native streaming of an answer (``chat.startStream`` / ``appendStream`` /
``stopStream``), through slack_sdk's own helper (``AsyncWebClient.chat_stream``), behind the
transport's preview calls (``gateway.core.ports.Previewing``).

Where Slack allows it (platforms.md §2, docs.slack.dev/reference/methods/chat.startStream):

* a streamed message is always a reply: the target needs a thread (``thread_ts``);
* outside a DM Slack needs the person it streams to: ``recipient_team_id`` (the workspace)
  and ``recipient_user_id`` (the asker, carried in the reply target's ``extra`` from ingest).
  Without them the answer streams by edits.

A stream only grows. While the answer's text grows it is appended; when it changes otherwise
(the model started over after a tool step, the question was edited) the stream is stopped and
the message continues as an edited preview (``chat.update``). The final text is always one
``chat.update`` of that same message, after the stream was stopped, with the answer's blocks:
the message shows exactly the stored reply, whatever the stream rendered on the way.

When Slack refuses the methods (``unknown_method``, a missing scope, a channel type it does
not stream to...), this answer falls back to a posted message edited as before, and the
refusal is remembered for ``REFUSAL_MEMORY_SECONDS`` (for every channel when the method itself
is refused, else for that channel).

After a crash the new process does not know the dead one's streams: a final edit of a preview
it did not start stops it first (``chat.stopStream``; a message that is not streaming answers
``message_not_in_streaming_state``, which is fine), so the takeover still ends in one message.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.extract import RECIPIENT
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError

log = structlog.get_logger(__name__)

#: how long a refusal of the streaming methods is remembered (seconds)
REFUSAL_MEMORY_SECONDS = 600.0
#: refusals of the methods themselves: nothing streams anywhere for a while
METHOD_REFUSED = frozenset(
    {
        "unknown_method",
        "method_deprecated",
        "deprecated_endpoint",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "is_bot",
        "enterprise_is_restricted",
        "access_denied",
    }
)
#: refusals for one place (a channel type or policy Slack does not stream to)
PLACE_REFUSED = frozenset(
    {
        "not_allowed",
        "channel_type_not_supported",
        "missing_recipient_team_id",
        "missing_recipient_user_id",
        "user_not_found",
        "team_not_found",
        "invalid_arguments",
        "invalid_thread_ts",
        "thread_not_found",
        "messages_tab_disabled",
        "restricted_action",
        "restricted_action_non_threadable_channel",
        "restricted_action_read_only_channel",
        "restricted_action_thread_locked",
        "restricted_action_thread_only_channel",
        "team_access_not_granted",
    }
)
#: a stream that has ended (stopped, or closed by Slack after a while): edit it instead
NOT_STREAMING = frozenset({"message_not_in_streaming_state", "message_not_found"})
#: streams and edited previews remembered at most (the oldest are forgotten first)
_REMEMBERED = 1000

_V = TypeVar("_V")


def _remember(book: OrderedDict[str, _V], ts: str, value: _V) -> None:
    book[ts] = value
    book.move_to_end(ts)
    while len(book) > _REMEMBERED:
        book.popitem(last=False)


def is_dm(channel: str) -> bool:
    return channel.startswith("D")


def error_code(exc: SlackApiError) -> str | None:
    """The ``error`` of a refused Slack call (``missing_scope``), if it says one."""
    data = getattr(exc.response, "data", None)
    error = data.get("error") if isinstance(data, Mapping) else None
    return error if isinstance(error, str) else None


@dataclass(slots=True)
class _Open:
    stream: AsyncChatStream
    #: the text appended so far (the preview part as the transport formats it)
    shown: str


class NativeStreams:
    """The answers this process streams natively, and where Slack refused to."""

    def __init__(
        self,
        client: AsyncWebClient,
        translate: Callable[[BaseException], DeliveryError],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._translate = translate
        self._clock = clock
        self._open: OrderedDict[str, _Open] = OrderedDict()
        #: previews that are posted messages (or stopped streams): edited, never stopped
        self._edited: OrderedDict[str, None] = OrderedDict()
        self._refused_until = 0.0
        self._refused_in: dict[str, float] = {}

    # --- where ------------------------------------------------------------------------------

    def allowed(self, target: ReplyTarget) -> bool:
        """Whether an answer to ``target`` may stream natively now."""
        if target.thread_id is None:
            return False  # streamed messages are replies
        if not is_dm(target.chat_id) and not target.extra.get(RECIPIENT):
            return False  # a channel needs the recipient
        now = self._clock()
        if now < self._refused_until:
            return False
        until = self._refused_in.get(target.chat_id)
        if until is not None:
            if now < until:
                return False
            del self._refused_in[target.chat_id]
        return True

    def _refused(self, target: ReplyTarget, error: str) -> None:
        until = self._clock() + REFUSAL_MEMORY_SECONDS
        if error in METHOD_REFUSED:
            self._refused_until = until
        else:
            self._refused_in[target.chat_id] = until
        log.info("slack_stream_refused", error=error, channel=target.chat_id)

    # --- the preview calls ---------------------------------------------------------------------

    async def start(self, target: ReplyTarget, text: str) -> str | None:
        """Begin a stream showing ``text``; its message ts, or ``None`` when Slack refused
        (the caller posts a message to edit instead)."""
        assert target.thread_id is not None
        recipient = target.extra.get(RECIPIENT)
        stream = await self._client.chat_stream(
            channel=target.chat_id,
            thread_ts=target.thread_id,
            recipient_team_id=target.scope if recipient else None,
            recipient_user_id=recipient or None,
            # the core paces previews (one update a second): each append goes out at once
            buffer_size=1,
        )
        try:
            await stream.append(markdown_text=text)
        except SlackApiError as exc:
            error = error_code(exc) or ""
            if error in METHOD_REFUSED or error in PLACE_REFUSED:
                self._refused(target, error)
                return None
            raise self._translate(exc) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._translate(exc) from exc
        ts = stream.ts
        if not ts:
            raise DeliveryError("slack: chat.startStream gave no ts", ambiguous=True)
        _remember(self._open, ts, _Open(stream, text))
        return ts

    def posted(self, ts: str) -> None:
        """``ts`` is a preview posted as a message: edited, never stopped."""
        _remember(self._edited, ts, None)

    async def append(self, ts: str, text: str) -> bool:
        """Show ``text`` in the stream ``ts`` by appending what is new. ``False``: not a
        stream (any more): the caller edits the message instead."""
        found = self._open.get(ts)
        if found is None:
            return False
        if not text.startswith(found.shown):
            # rewritten, not grown: a stream cannot take text back, so it ends here and
            # the message goes on as an edited preview
            await self.stop(ts)
            return False
        delta = text[len(found.shown) :]
        if not delta:
            return True
        try:
            await found.stream.append(markdown_text=delta)
        except SlackApiError as exc:
            if error_code(exc) in NOT_STREAMING:
                # Slack closed it (streams end after a while): edit it from now on
                self._open.pop(ts, None)
                self.posted(ts)
                return False
            raise self._translate(exc) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise self._translate(exc) from exc
        found.shown = text
        return True

    async def stop(self, ts: str, channel: str | None = None) -> None:
        """End the stream ``ts`` before its message is edited or deleted: ours through the
        sdk's helper; one this process does not know (a dead run's) with ``chat.stopStream``
        when ``channel`` is given. A message that is not streaming is fine."""
        found = self._open.pop(ts, None)
        if found is None and (ts in self._edited or channel is None):
            return
        try:
            if found is not None:
                await found.stream.stop()
            else:
                assert channel is not None
                await self._client.chat_stopStream(channel=channel, ts=ts)
        except SlackApiError as exc:
            error = error_code(exc)
            if error not in NOT_STREAMING and error not in METHOD_REFUSED:
                raise self._translate(exc) from exc
        except SlackRequestError:
            pass  # the helper's own "already completed": nothing to stop
        except (TimeoutError, aiohttp.ClientError) as exc:
            # stopping twice is harmless: a retry of the delivery tries again
            if found is not None:
                _remember(self._open, ts, found)
            raise DeliveryError(f"slack stream stop: {exc.__class__.__name__}") from exc
        self.posted(ts)

    def streaming(self, ts: str) -> bool:
        return ts in self._open
