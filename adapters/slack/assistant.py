"""Slack's assistant threads (platforms.md §2; docs.slack.dev/reference/events/
assistant_thread_started): the suggested prompts a thread opens with, and its title.

* ``assistant_thread_started``: the place's profile's ``suggested_prompts`` (at most Slack's
  four) go to ``assistant.threads.setSuggestedPrompts``; a profile without them offers none.
* The first question of a DM thread (the session is new) names the thread
  (``assistant.threads.setTitle``), from its first line.

Both are decoration: each call has a short budget (the event is acked after it), a failure is
logged and nothing else, and when Slack says the methods are not for this app (no
``assistant:write``, not an AI app) they are not tried again. The "is thinking…" status is the
transport's typing indicator (``assistant.threads.setStatus``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from adapters.slack.streams import error_code
from gateway.core.domain import SessionKey

log = structlog.get_logger(__name__)

#: Slack shows at most four suggested prompts
MAX_PROMPTS = 4
#: a prompt's title (the button) is cut to this many characters; its message is the whole text
PROMPT_TITLE_CHARS = 75
#: a thread's title, from its first question, is cut to this many characters
TITLE_CHARS = 60
#: each call's budget (seconds): the event waits for it before it is acked
CALL_BUDGET_SECONDS = 1.0
#: answers meaning "not for this app": stop calling
UNAVAILABLE = frozenset(
    {
        "missing_scope",
        "not_allowed_token_type",
        "unknown_method",
        "method_deprecated",
        "feature_not_enabled",
        "access_denied",
    }
)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def title_of(question: str) -> str | None:
    """A thread's title: its first question's first non-empty line, cut short."""
    line = next((ln for ln in question.splitlines() if ln.strip()), "")
    return _cut(line, TITLE_CHARS) or None


class AssistantThreads:
    """The assistant-thread calls of one adapter, and whether Slack takes them."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self.available = True

    async def started(self, key: SessionKey, prompts: Sequence[str]) -> None:
        """Offer ``prompts`` in the thread that just opened at ``key``."""
        chosen = [p for p in prompts if p.strip()][:MAX_PROMPTS]
        if not (chosen and key.thread_id and self.available):
            return
        await self._call(
            "suggested_prompts",
            self._client.assistant_threads_setSuggestedPrompts(
                channel_id=key.chat_id,
                thread_ts=key.thread_id,
                prompts=[{"title": _cut(p, PROMPT_TITLE_CHARS), "message": p} for p in chosen],
            ),
        )

    async def first_question(self, key: SessionKey, question: str) -> None:
        """Name the thread at ``key`` after its first question."""
        title = title_of(question)
        if not (title and key.thread_id and self.available):
            return
        await self._call(
            "title",
            self._client.assistant_threads_setTitle(
                channel_id=key.chat_id, thread_ts=key.thread_id, title=title
            ),
        )

    async def _call(self, what: str, call: Awaitable[AsyncSlackResponse]) -> None:
        try:
            await asyncio.wait_for(call, CALL_BUDGET_SECONDS)
        except SlackApiError as exc:
            error = error_code(exc)
            if error in UNAVAILABLE:
                self.available = False
                log.info("slack_assistant_threads_unavailable", error=error)
            else:
                log.info("slack_assistant_thread_failed", what=what, error=error)
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.info("slack_assistant_thread_failed", what=what, error=type(exc).__name__)
