"""What both Slack ingress paths share, as one object they are given: the intake and the bot's
identity bound at start, one event through extraction into the inbox, an approval press
decided by the core, and the first contact inside an existing thread, whose earlier messages
are fetched with ``conversations.replies`` and submitted first as backfill rows (context,
never answered)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.actions import approval_action_of, feedback_action_of
from adapters.slack.assistant import AssistantThreads
from adapters.slack.blocks import FEEDBACK_ACTION, FEEDBACK_VALUES
from adapters.slack.extract import (
    PLATFORM,
    BotIdentity,
    assistant_thread_of,
    backfill_root,
    extract_event,
    extract_history,
    is_dm_channel,
    reaction_of,
    ts_key,
)
from adapters.slack.transport import APPROVE_ACTION, DENY_ACTION, SlackTransport
from gateway.core.domain import Envelope, EventKind, Extracted, ReplyTarget
from gateway.core.hub import KeyedLock
from gateway.core.ports import ApprovalClick, IngestOutcome, Intake
from gateway.inbound.ingress import ingest

log = structlog.get_logger(__name__)

#: Slack retries an event that is not answered within 3 s (platforms.md §2.3); the history
#: fetch must leave time for the stores that follow it.
BACKFILL_BUDGET_SECONDS = 1.5

#: at most this many earlier thread messages become context (the newest ones, plus the root)
BACKFILL_MAX_MESSAGES = 200

_BACKFILL_PAGE = 200

_BACKFILL_MAX_PAGES = 10


def _in_dm_thread(envelope: Envelope) -> bool:
    return (
        envelope.kind is EventKind.MESSAGE
        and envelope.place.direct
        and envelope.key.thread_id is not None
    )


class SlackIngest:
    """The shared ingest of Slack events: the Events API ingress (``events_api.py``), the
    Socket Mode ingress (``socket_mode.py``) and the bolt listeners both dispatch into
    (``bolt_app.py``) are built around it and take it."""

    def __init__(self, client: AsyncWebClient, transport: SlackTransport) -> None:
        self._client = client
        self._transport = transport
        #: suggested prompts and titles of assistant threads
        self.assistant = AssistantThreads(client)
        self._backfill_locks = KeyedLock()
        self._intake: Intake | None = None
        self._me: BotIdentity | None = None

    @property
    def me(self) -> BotIdentity | None:
        """The bot's identity (``auth.test``), once started."""
        return self._me

    def bind(self, intake: Intake, me: BotIdentity) -> None:
        """Store through ``intake`` as ``me`` (the adapter's start)."""
        self._me = me
        self._intake = intake

    def unbind(self) -> None:
        """Nothing is stored from now on: handlers answer 503 / do not ack, so Slack retries
        (the adapter's stop)."""
        self._intake = None

    def ready(self) -> tuple[Intake, BotIdentity] | None:
        """The intake and the identity, or ``None`` before start and after stop."""
        if self._intake is None or self._me is None:
            return None
        return self._intake, self._me

    @property
    def intake(self) -> Intake | None:
        return self._intake

    async def ingest(
        self, payload: object, intake: Intake, me: BotIdentity
    ) -> tuple[Extracted, IngestOutcome]:
        raw: Mapping[str, Any] = payload if isinstance(payload, Mapping) else {"body": payload}
        event_id = raw.get("event_id")

        async def submit(extracted: Extracted) -> IngestOutcome:
            root = backfill_root(extracted) if isinstance(extracted, Envelope) else None
            if isinstance(extracted, Envelope) and root is not None:
                # app_mention and message for one post arrive together: the first stores the
                # thread's history and then the mention; the second must wait for both, or
                # it would see the session half-built and store the mention before the history
                async with self._backfill_locks.hold(str(extracted.key)):
                    first = not await intake.knows(extracted.key)
                    if first:
                        await self._backfill(extracted, root, intake, me)
                    outcome = await intake.submit(extracted, raw=raw)
                if first and outcome.status == "accepted" and _in_dm_thread(extracted):
                    # the first question of a DM thread (an assistant thread) names it
                    await self.assistant.first_question(extracted.key, extracted.text)
                return outcome
            return await intake.submit(extracted, raw=raw)

        # +1/-1 on the bot's reply is that reply's feedback (the reaction event itself is
        # still recorded as ignored: it is not a message)
        decided, outcome = await ingest(
            intake,
            platform=PLATFORM,
            raw=raw,
            extract=lambda: extract_event(payload, me=me),
            reaction=lambda: reaction_of(payload),
            event_id=event_id if isinstance(event_id, str) else None,
            submit=submit,
        )
        opened = assistant_thread_of(payload)
        if opened is not None and outcome.status != "duplicate":
            # recorded like any event we do not answer; the thread opens with the place's
            # suggested prompts (a retried delivery offers them once)
            await self.assistant.started(opened.key, intake.profile(opened.key).suggested_prompts)
        return decided, outcome

    async def feedback_press(self, payload: Mapping[str, Any], intake: Intake) -> bool:
        """Record a press of an answer's feedback buttons as that person's feedback on the
        answer (the table the web chat's thumbs fill); tell only the presser when the message
        is not one of our answers in that channel. ``False``: not a feedback press."""
        press = feedback_action_of(payload, action_id=FEEDBACK_ACTION, values=FEEDBACK_VALUES)
        if press is None:
            return False
        recorded = await intake.record_feedback(
            platform=PLATFORM,
            chat_id=press.channel_id,
            message_id=press.message_ts,
            user_id=press.user_id,
            value=press.value,
        )
        log.info("slack_feedback_press", recorded=recorded, value=press.value)
        if not recorded:
            container = payload.get("container")
            thread = container.get("thread_ts") if isinstance(container, Mapping) else None
            await self._transport.notify(
                ReplyTarget(
                    platform=PLATFORM,
                    scope=(self._me.team_id if self._me else None) or "",
                    chat_id=press.channel_id,
                    thread_id=thread if isinstance(thread, str) and thread else None,
                ),
                press.user_id,
                "That is not one of my answers here, so I could not record your feedback.",
            )
        return True

    async def approval_press(self, payload: Mapping[str, Any], intake: Intake) -> bool:
        """Decide an approval press (HTTP or Socket Mode ``interactive``); tell only the
        presser when it was not theirs to decide. ``False``: not an approval press."""
        press = approval_action_of(payload, approve_action=APPROVE_ACTION, deny_action=DENY_ACTION)
        if press is None:
            return False
        outcome = await intake.approval_click(
            ApprovalClick(
                platform=PLATFORM,
                approval_id=press.approval_id,
                user_id=press.user_id,
                approve=press.approve,
                chat_id=press.channel_id,
                thread_id=press.thread_ts,
                message_id=press.message_ts,
            )
        )
        log.info("slack_approval_press", outcome=outcome.outcome)
        if outcome.outcome not in ("approved", "denied"):
            await self._transport.notify(
                ReplyTarget(
                    platform=PLATFORM,
                    scope=(self._me.team_id if self._me else None) or "",
                    chat_id=press.channel_id,
                    thread_id=press.thread_ts,
                ),
                press.user_id,
                outcome.message,
            )
        return True

    async def _backfill(
        self, mention: Envelope, root: str, intake: Intake, me: BotIdentity
    ) -> None:
        channel = mention.key.chat_id
        try:
            history = await asyncio.wait_for(
                self._thread_history(channel, root, before=mention.message_id),
                timeout=BACKFILL_BUDGET_SECONDS,
            )
        except (TimeoutError, SlackApiError, aiohttp.ClientError) as exc:
            # The mention is still stored and answered, with less context.
            log.warning(
                "slack_backfill_failed",
                channel=channel,
                thread_ts=root,
                error=exc.__class__.__name__,
            )
            return
        is_dm = is_dm_channel(channel, mention.metadata.get("channel_type"))
        stored = 0
        for item in history:
            extracted = extract_history(
                item, team_id=mention.key.scope, channel=channel, is_dm=is_dm, me=me
            )
            if isinstance(extracted, Envelope) and extracted.key == mention.key:
                await intake.submit(extracted, raw=item)
                stored += 1
        log.info("slack_backfilled", channel=channel, thread_ts=root, messages=stored)

    async def _thread_history(
        self, channel: str, root: str, *, before: str
    ) -> list[Mapping[str, Any]]:
        """The thread's messages older than ``before``, oldest first: the root plus the newest
        ``BACKFILL_MAX_MESSAGES - 1`` replies."""
        limit = ts_key(before)
        messages: list[Mapping[str, Any]] = []
        cursor: str | None = None
        for _ in range(_BACKFILL_MAX_PAGES):
            response = await self._client.conversations_replies(
                channel=channel, ts=root, limit=_BACKFILL_PAGE, cursor=cursor
            )
            page = response.get("messages")
            for item in page if isinstance(page, list) else []:
                if isinstance(item, Mapping) and ts_key(str(item.get("ts", ""))) < limit:
                    messages.append(item)
            metadata = response.get("response_metadata")
            next_cursor = metadata.get("next_cursor") if isinstance(metadata, Mapping) else None
            if not next_cursor or not response.get("has_more", True):
                break
            cursor = str(next_cursor)
        messages.sort(key=lambda m: ts_key(str(m.get("ts", ""))))
        if len(messages) > BACKFILL_MAX_MESSAGES:
            messages = messages[:1] + messages[-(BACKFILL_MAX_MESSAGES - 1) :]
        return messages
