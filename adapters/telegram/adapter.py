"""Telegram ingress (long polling or webhook) into the core's ``Intake``, acking only after
``submit`` returned, plus lifecycle (getMe, setMyCommands, setWebhook/deleteWebhook)."""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from telegram import BotCommand
from telegram.error import Conflict, InvalidToken, RetryAfter, TelegramError, TimedOut

from adapters.telegram.check import check_bot
from adapters.telegram.extract import (
    PLATFORM,
    BotIdentity,
    callback_of,
    extract_update,
    reaction_of,
)
from adapters.telegram.settings import TelegramSettings
from adapters.telegram.transport import (
    CHAT_INTERVAL,
    GROUP_INTERVAL,
    TelegramBot,
    TelegramTransport,
    make_bot,
    retry_after_seconds,
)
from gateway.core.commands import COMMANDS
from gateway.core.domain import Extracted
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.ports import ApprovalClick, Check, IngestOutcome, Intake, Transport
from gateway.inbound.ingress import ingest, json_body

log = structlog.get_logger(__name__)

WEBHOOK_PATH = "/telegram/webhook"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
#: setWebhook secret_token: "1-256 characters. Only A-Z, a-z, 0-9, _ and - are allowed."
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
#: update types we ask for, set explicitly because an omitted list means "keep the previous
#: setting" (Bot API getUpdates/setWebhook), which may be anything an earlier deploy chose
ALLOWED_UPDATES: tuple[str, ...] = (
    "message",
    "edited_message",
    "channel_post",
    "edited_channel_post",
    "business_message",
    "edited_business_message",
    "deleted_business_messages",
    "message_reaction",
    # approval buttons
    "callback_query",
)
#: Bot API updates are small; anything larger is not Telegram talking to us
_MAX_WEBHOOK_BODY = 1 << 20


class TelegramAdapter:
    platform = PLATFORM

    def __init__(
        self,
        settings: TelegramSettings,
        *,
        bot: TelegramBot | None = None,
        poll_timeout: int = 30,
        backoff_initial: float = 1.0,
        backoff_max: float = 30.0,
        stop_timeout: float = 10.0,
        pace: tuple[float, float] = (CHAT_INTERVAL, GROUP_INTERVAL),
    ) -> None:
        if settings.telegram_bot_token is None:
            raise ConfigError("TELEGRAM_BOT_TOKEN", "required for the Telegram adapter")
        self._mode = settings.telegram_mode
        self._webhook_url = settings.telegram_webhook_url
        secret = settings.telegram_webhook_secret
        self._secret = secret.get_secret_value() if secret is not None else None
        self._bot = bot or make_bot(
            settings.telegram_bot_token.get_secret_value(), settings.telegram_api_base_url
        )
        self._transport = TelegramTransport(
            self._bot, chat_interval=pace[0], group_interval=pace[1]
        )
        self.transport: Transport = self._transport
        self._poll_timeout = poll_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._stop_timeout = stop_timeout

        self._intake: Intake | None = None
        self._identity: BotIdentity | None = None
        self._stopping = asyncio.Event()
        self._poll_task: asyncio.Task[None] | None = None
        self._in_fetch = False
        #: next getUpdates offset: last update whose ``submit`` returned, plus one
        self._offset: int | None = None
        #: the offset last sent to Telegram, i.e. what Telegram has been told is confirmed
        self._sent_offset: int | None = None

    @property
    def identity(self) -> BotIdentity | None:
        return self._identity

    # --- lifecycle --------------------------------------------------------------------------

    async def start(self, intake: Intake) -> None:
        if self._mode == "webhook":
            self._check_webhook_settings()
        try:
            await self._bootstrap()
        except BaseException:
            await self._transport.close()  # the runtime does not stop an adapter that never started
            raise
        self._intake = intake
        assert self._identity is not None
        if self._mode == "polling":
            # two pollers on one token fight with 409 Conflict (platforms.md §1.7): the loop
            # runs only on the replica holding this bot's leader lock; sending works everywhere
            self._poll_task = asyncio.create_task(
                intake.lead(
                    f"telegram-polling:{self._identity.id}",
                    self._poll_loop,
                    stopping=self._stopping,
                ),
                name="telegram-polling",
            )
        log.info(
            "telegram_started",
            bot_id=self._identity.id,
            bot_username=self._identity.username,
            mode=self._mode,
        )

    async def _bootstrap(self) -> None:
        """getMe, setMyCommands, then setWebhook (webhook mode) or deleteWebhook (polling)."""
        try:
            await self._transport.open()  # getMe
        except InvalidToken as exc:
            raise ConfigError("TELEGRAM_BOT_TOKEN", "rejected by the Bot API (getMe)") from exc
        except TelegramError as exc:
            raise GatewayError(f"telegram getMe failed: {exc.message}") from exc
        me = self._bot.bot
        self._identity = BotIdentity(id=me.id, username=me.username or "")
        await self._register_commands()
        try:
            if self._mode == "webhook":
                assert self._webhook_url is not None and self._secret is not None
                await self._bot.set_webhook(
                    url=self._webhook_url,
                    secret_token=self._secret,
                    allowed_updates=list(ALLOWED_UPDATES),
                )
            else:
                # getUpdates fails with 409 while a webhook is set; never drop pending updates
                # (they are the messages sent while we were down)
                await self._bot.delete_webhook(drop_pending_updates=False)
        except TelegramError as exc:
            raise GatewayError(f"telegram {self._mode} setup failed: {exc.message}") from exc

    async def stop(self) -> None:
        self._stopping.set()
        task, self._poll_task = self._poll_task, None
        if task is not None:
            if self._in_fetch:
                # waiting on a long poll: nothing of ours is in flight, cancel it now
                task.cancel()
            # otherwise a submit is running: let it return so its update is acked next time
            done, _ = await asyncio.wait({task}, timeout=self._stop_timeout)
            if not done:
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self._confirm_offset()
        await self._transport.close()
        log.info("telegram_stopped")

    def http_routes(self) -> Sequence[Any]:
        if self._mode != "webhook":
            return []
        return [Route(WEBHOOK_PATH, self._webhook, methods=["POST"], name="telegram_webhook")]

    async def check(self) -> Sequence[Check]:
        """getMe, privacy mode, webhook settings (``gateway doctor`` / ``gateway setup``)."""
        webhook = self._check_webhook_settings if self._mode == "webhook" else None
        return await check_bot(self._bot, webhook_settings=webhook)

    def _check_webhook_settings(self) -> None:
        if not self._webhook_url:
            raise ConfigError("TELEGRAM_WEBHOOK_URL", "required when TELEGRAM_MODE=webhook")
        if not self._secret:
            # without it anyone who finds the URL can inject updates
            raise ConfigError("TELEGRAM_WEBHOOK_SECRET", "required when TELEGRAM_MODE=webhook")
        if not _SECRET_RE.match(self._secret):
            raise ConfigError(
                "TELEGRAM_WEBHOOK_SECRET", "1-256 characters of A-Z, a-z, 0-9, _ and - only"
            )

    async def _register_commands(self) -> None:
        try:
            await self._bot.set_my_commands(
                [BotCommand(c.name, c.summary) for c in COMMANDS.values()]
            )
        except TelegramError as exc:
            # Only the "/" menu suffers; typed commands still work, so do not refuse to start.
            log.warning("telegram_set_commands_failed", error=exc.message)

    # --- ingress ---------------------------------------------------------------------------

    async def _callback(self, update: Mapping[str, Any]) -> None:
        """An inline button press: an approval card's is decided by the core (which checks
        the chat, topic, card and who pressed); every query is answered (answerCallbackQuery)
        so the client stops its spinner, with the outcome as a short notice. The update is
        still recorded (as ignored) by the submit that follows."""
        found = callback_of(update)
        if found is None:
            return
        query_id, press = found
        text: str | None = None
        alert = False
        if press is not None and self._intake is not None:
            outcome = await self._intake.approval_click(
                ApprovalClick(
                    platform=PLATFORM,
                    approval_id=press.approval_id,
                    user_id=press.user_id,
                    approve=press.approve,
                    chat_id=press.chat_id,
                    thread_id=press.thread_id,
                    message_id=press.message_id,
                )
            )
            text = outcome.message
            alert = outcome.outcome == "not_allowed"
        try:
            await self._bot.answer_callback_query(query_id, text=text, show_alert=alert)
        except TelegramError as exc:
            # a query older than ~15 s cannot be answered any more; the decision stands
            log.info("telegram_answer_callback_failed", error=exc.message)

    async def _ingest_one(
        self, intake: Intake, update: Mapping[str, Any]
    ) -> tuple[Extracted, IngestOutcome]:
        """Extract, record a 👍/👎 as feedback (the update itself is still recorded, as
        ignored), submit; raises if not stored. An approval button press is decided first
        (and the query answered); the update itself is then recorded like any other."""
        await self._callback(update)
        assert self._identity is not None
        me = self._identity
        update_id = update.get("update_id") if isinstance(update, Mapping) else None
        return await ingest(
            intake,
            platform=PLATFORM,
            raw=update,
            extract=lambda: extract_update(update, bot=me),
            reaction=lambda: reaction_of(update),
            event_id=str(update_id) if isinstance(update_id, int) else None,
        )

    # --- long polling -----------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        """getUpdates, submit each update, and only then move the offset past it: the next
        getUpdates call is what confirms (platforms.md §1.7), so a crash before ``submit``
        returned means Telegram redelivers the update and the inbox dedupes it. PTB's
        Updater is not used because it confirms updates once queued, not once handled."""
        backoff = self._backoff_initial
        while not self._stopping.is_set():
            delay: float
            try:
                self._in_fetch = True
                try:
                    offset = self._offset
                    updates = await self._bot.get_raw_updates(
                        offset=offset,
                        poll_seconds=self._poll_timeout,
                        allowed_updates=ALLOWED_UPDATES,
                    )
                finally:
                    self._in_fetch = False
                self._sent_offset = offset
                await self._ingest(updates)
                # reset only after a successful ingest: a fetch that works while storing
                # fails must keep backing off
                backoff = self._backoff_initial
                continue
            except asyncio.CancelledError:
                raise
            except RetryAfter as exc:
                delay = max(retry_after_seconds(exc), self._backoff_initial)
                log.warning("telegram_polling_flood_control", retry_after=delay)
            except Conflict as exc:
                delay = backoff
                log.error(
                    "telegram_polling_conflict",
                    error=exc.message,
                    hint="another process is polling this bot token, or a webhook is set; "
                    "only one poller per token may run",
                    retry_in=delay,
                )
            except TimedOut:
                # the long poll outlived its read timeout (a silent proxy); just poll again
                continue
            except InvalidToken as exc:
                delay = self._backoff_max
                log.error("telegram_polling_token_rejected", error=exc.message, retry_in=delay)
            except TelegramError as exc:
                delay = backoff
                log.warning("telegram_polling_failed", error=exc.message, retry_in=delay)
            except Exception:  # intake down (DB) or a bug: retry, never exit. The offset
                # stays put (Telegram keeps the updates); retried at least every
                # _INGEST_RETRY_MAX seconds so answers resume soon after the database does
                delay = min(backoff, _INGEST_RETRY_MAX)
                log.exception("telegram_ingest_failed", offset=self._offset, retry_in=delay)
            backoff = min(backoff * 2, self._backoff_max)
            await self._pause(delay)

    async def _ingest(self, updates: list[dict[str, Any]]) -> None:
        intake = self._intake
        assert intake is not None
        for raw in updates:
            if self._stopping.is_set():
                return  # the rest stay unconfirmed and are redelivered after the restart
            _, outcome = await self._ingest_one(intake, raw)
            update_id = raw.get("update_id") if isinstance(raw, Mapping) else None
            if isinstance(update_id, int):
                # last processed + 1, not a running max: update ids restart at a random value
                # after a week without updates (Bot API "Update")
                self._offset = update_id + 1
            log.info(
                "telegram_update_ingested",
                update_id=update_id,
                status=outcome.status,
                reason=outcome.reason,
            )

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), timeout=seconds)
        except TimeoutError:
            pass

    async def _confirm_offset(self) -> None:
        """Tell Telegram about updates submitted since the last poll, so a clean restart does
        not redeliver them (harmless if skipped: the inbox dedupes)."""
        if self._offset is None or self._offset == self._sent_offset:
            return
        try:
            await self._bot.get_raw_updates(
                offset=self._offset, poll_seconds=0, limit=1, allowed_updates=ALLOWED_UPDATES
            )
        except TelegramError as exc:
            log.info("telegram_confirm_offset_failed", error=exc.message)

    # --- webhook ----------------------------------------------------------------------------

    async def _webhook(self, request: Request) -> Response:
        intake = self._intake
        if intake is None or self._identity is None or self._stopping.is_set():
            return JSONResponse({"ok": False, "error": "not ready"}, status_code=503)
        given = request.headers.get(SECRET_HEADER, "")
        if self._secret is None or not hmac.compare_digest(
            given.encode("utf-8"), self._secret.encode("utf-8")
        ):
            log.warning("telegram_webhook_forbidden", client=_client(request))
            return JSONResponse({"ok": False, "error": "forbidden"}, status_code=403)
        body = await request.body()
        if len(body) > _MAX_WEBHOOK_BODY:
            return JSONResponse({"ok": False, "error": "too large"}, status_code=413)
        try:
            parsed = await json_body(
                intake,
                body,
                platform=PLATFORM,
                error={"ok": False, "error": "bad json"},
                object_only=True,
            )
            if isinstance(parsed, Response):
                return parsed
            payload: dict[str, Any] = parsed.value
            _, outcome = await self._ingest_one(intake, payload)
        except Exception:  # not stored: answer 503 so Telegram redelivers
            log.exception("telegram_webhook_ingest_failed")
            return JSONResponse({"ok": False, "error": "not stored"}, status_code=503)
        log.info(
            "telegram_update_ingested",
            update_id=payload.get("update_id"),
            status=outcome.status,
            reason=outcome.reason,
            via="webhook",
        )
        return JSONResponse({"ok": True})


#: the longest pause of polling while updates cannot be stored (a database outage)
_INGEST_RETRY_MAX = 2.0


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None
