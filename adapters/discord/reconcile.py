"""Discord's "nothing missed" across sessions.

Within one gateway session Discord replays what a dropped connection missed when the client
resumes (hikari sends RESUME with the session id and the last sequence). A *new* session
(a restart, an invalid session, a session too old to resume) replays nothing: every channel
the bot has seen keeps a cursor - the id of the last message handled there, a snowflake,
so ordered in time - and after each READY the messages after it are read from the channel's
history (``GET /channels/{id}/messages?after=``) and submitted through the same door. A
message seen both ways has the same ids; the core's inbox keeps one.

The cursors are one JSON object saved through the intake (``{channel: last id}``, the most
recent ``MAX_CHANNELS``). A message whose handling failed holds its channel's cursor just
before it (with a dead letter), so it is read again at the next catch-up: on an idle tick of
the event loop, or after the next READY.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from adapters.discord.api import HISTORY_LIMIT, DiscordApi, DiscordApiError
from adapters.discord.extract import PLATFORM, Channel, is_snowflake, message_order
from gateway.core.domain import Rejected
from gateway.core.errors import GatewayError
from gateway.core.lifecycle.supervisor import persist
from gateway.core.ports import Intake

log = structlog.get_logger(__name__)

#: channels whose cursors are kept (the most recently active; the map is saved after each
#: message, so it stays small)
MAX_CHANNELS = 500
#: a 429 while reading history is waited out (its retry_after) this many times per page
HISTORY_RETRIES = 3
#: and waited out only up to this long; a longer limit leaves the channel to the next catch-up
MAX_HISTORY_WAIT = 30.0
#: pages of history read per channel and catch-up (100 messages each)
MAX_PAGES = 50
#: threads a new session's guild list shows active since the last message handled, which no
#: cursor follows, read at most per guild list (the most recently active first)
MAX_GAP_THREADS = 50
_TRANSIENT_RETRY_SECONDS = 1.3

#: submits one fetched message (the adapter's own path: lookup, extract, door)
Submit = Callable[[Mapping[str, Any], Channel, str], Awaitable[None]]


class Reconciler:
    """The channel cursors of one bot and the history catch-up after a new session."""

    def __init__(self, *, api: DiscordApi) -> None:
        self._api = api
        self._intake: Intake | None = None
        self._name = ""
        self._cursors: dict[str, int] | None = None
        #: channel id -> the oldest message id whose handling failed there
        self._held: dict[str, int] = {}
        self._retry_at = 0.0
        self._failures = 0
        #: completed catch-ups, and messages they submitted (observability, tests)
        self.catch_ups = 0
        self.caught_up = 0
        #: the newest message handled before this session's catch-up (the newest cursor):
        #: a thread active after it that no cursor follows began or woke up in the gap
        self._caught_up_from: int | None = None

    def bind(self, intake: Intake, bot_id: str) -> None:
        self._intake = intake
        self._name = f"{PLATFORM}:{bot_id}:channels"

    def _require(self) -> Intake:
        if self._intake is None:
            raise GatewayError("discord adapter not started")
        return self._intake

    # --- cursors -------------------------------------------------------------------------

    async def cursors(self) -> dict[str, int]:
        if self._cursors is not None:
            return self._cursors
        intake = self._require()
        raw = await persist(
            lambda: intake.load_cursor(self._name),
            what="discord_load_cursor",
            deadline=_TRANSIENT_RETRY_SECONDS,
        )
        loaded: dict[str, int] = {}
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                log.warning("discord_cursors_unreadable")
                parsed = {}
            if isinstance(parsed, dict):
                loaded = {
                    k: int(v) for k, v in parsed.items() if is_snowflake(k) and is_snowflake(v)
                }
        self._cursors = loaded
        return loaded

    async def _save(self) -> None:
        cursors = await self.cursors()
        if len(cursors) > MAX_CHANNELS:
            keep = sorted(cursors.items(), key=lambda kv: kv[1])[-MAX_CHANNELS:]
            cursors.clear()
            cursors.update(keep)
        value = json.dumps({k: str(v) for k, v in cursors.items()})
        intake = self._require()
        await persist(
            lambda: intake.save_cursor(self._name, value),
            what="discord_save_cursor",
            deadline=_TRANSIENT_RETRY_SECONDS,
        )

    async def seen(self, channel_id: str, message_id: str) -> None:
        """A message was durably handled: its channel's cursor moves to it (never past a
        held one)."""
        if not is_snowflake(channel_id) or not is_snowflake(message_id):
            return
        cursors = await self.cursors()
        value = int(message_id)
        held = self._held.get(channel_id)
        if held is not None:
            value = min(value, held - 1)
        if cursors.get(channel_id, -1) >= value:
            return
        cursors[channel_id] = value
        await self._save()

    async def watch(self, channel_id: str, after: str) -> None:
        """Follow a channel from ``after`` on (a thread the bot just started, whose first
        messages may come before the bot's own)."""
        cursors = await self.cursors()
        if is_snowflake(channel_id) and is_snowflake(after) and channel_id not in cursors:
            cursors[channel_id] = int(after)
            await self._save()

    async def follow_listed(
        self,
        threads: list[Mapping[str, Any]],
        bot_id: str,
        lookup: Callable[[str], Awaitable[Channel]],
        submit: Submit,
    ) -> int:
        """A new session's guild list of active threads (GUILD_CREATE, after the READY's
        catch-up): those no cursor follows whose THREAD_CREATE no session heard (a replica
        taking the connection over; the bot's answer that starts a thread can be sent by any
        replica) are followed from their start and read now; what was already handled is the
        inbox's duplicate. Which ones: the bot's own, and those whose last message is newer
        than the newest one handled before this session (a thread a person started, or wrote
        in for the first time, while no session was there; Discord may also drop thread
        events). A first start (no cursor yet) reads no one else's; at most
        ``MAX_GAP_THREADS`` of them, the most recently active first."""
        cursors = await self.cursors()
        since = self._caught_up_from
        own: list[str] = []
        active: list[tuple[int, str]] = []
        for raw in threads:
            cid = str(raw.get("id"))
            if not is_snowflake(cid) or cid in cursors:
                continue
            last = raw.get("last_message_id")
            if str(raw.get("owner_id")) == bot_id:
                own.append(cid)
            elif since is not None and is_snowflake(last) and int(str(last)) > since:
                active.append((int(str(last)), cid))
        active.sort(reverse=True)
        if len(active) > MAX_GAP_THREADS:
            log.warning("discord_gap_threads_capped", active=len(active), read=MAX_GAP_THREADS)
        new = {cid: int(cid) - 1 for cid in own + [cid for _, cid in active[:MAX_GAP_THREADS]]}
        cursors.update(new)
        total = await self._read(new, lookup, submit)
        if new:
            await self._save()
            self.caught_up += total
            log.info("discord_threads_followed", threads=len(new), submitted=total)
        return total

    async def hold(self, message: Mapping[str, Any] | None, exc: BaseException, raw: Any) -> None:
        """Handling an event failed: a dead letter, and for a new ``message`` its channel's
        cursor held before it."""
        cid, mid = (message.get("channel_id"), message.get("id")) if message else (None, None)
        if is_snowflake(cid) and is_snowflake(mid):
            self._held[str(cid)] = min(self._held.get(str(cid), int(str(mid))), int(str(mid)))
            log.warning("discord_message_held", channel_id=cid, message_id=mid)
        try:
            await self._require().submit(
                Rejected(
                    platform=PLATFORM,
                    reason=f"handler failed: {type(exc).__name__}: {exc}"[:500],
                ),
                raw=raw,
            )
        except Exception:  # broad: the store itself fails; the hold still retries
            log.exception("discord_dead_letter_failed")

    # --- catch-up ------------------------------------------------------------------------

    async def catch_up(self, channel: Callable[[str], Awaitable[Channel]], submit: Submit) -> int:
        """Every channel with a cursor: the messages after it, oldest first."""
        started = time.monotonic()
        cursors = dict(await self.cursors())
        self._caught_up_from = max(cursors.values(), default=None)
        total = await self._read(cursors, channel, submit)
        self.catch_ups += 1
        self.caught_up += total
        log.info(
            "discord_caught_up",
            channels=len(cursors),
            submitted=total,
            seconds=round(time.monotonic() - started, 3),
        )
        return total

    async def _read(
        self,
        cursors: Mapping[str, int],
        lookup: Callable[[str], Awaitable[Channel]],
        submit: Submit,
    ) -> int:
        """Each channel's messages after its cursor, submitted; how many."""
        total = 0
        for cid, cursor in cursors.items():
            try:
                total += await self._channel(cid, cursor, lookup, submit)
            except Exception:  # broad: one channel's failure (gone, no access) spares the rest
                log.warning("discord_catch_up_failed", channel_id=cid, exc_info=True)
        return total

    async def _channel(
        self,
        cid: str,
        cursor: int,
        lookup: Callable[[str], Awaitable[Channel]],
        submit: Submit,
    ) -> int:
        held = self._held.pop(cid, None)
        after = min(cursor, held - 1) if held is not None else cursor
        info: Channel | None = None
        submitted = 0
        for _ in range(MAX_PAGES):
            page = await self._page(cid, after)
            page.sort(key=message_order)
            for message in page:
                if message_order(message) <= after:
                    continue
                if info is None:
                    info = await lookup(cid)
                await submit(message, info, "history")
                submitted += 1
                after = message_order(message)
            if len(page) < HISTORY_LIMIT:
                break
        return submitted

    async def _page(self, cid: str, after: int) -> list[dict[str, Any]]:
        """One page of history; a 429 is waited out (the catch-up runs before any new event
        is read, so waiting here is what keeps the conversation in order)."""
        for attempt in range(HISTORY_RETRIES + 1):
            try:
                return await self._api.messages_after(cid, str(after))
            except DiscordApiError as exc:
                wait = exc.retry_after
                if exc.status != 429 or wait is None or wait > MAX_HISTORY_WAIT:
                    raise
                if attempt == HISTORY_RETRIES:
                    raise
                log.info("discord_history_rate_limited", channel_id=cid, retry_after=wait)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    def wants_retry(self) -> bool:
        return bool(self._held) and time.monotonic() >= self._retry_at

    async def retry_held(
        self, channel: Callable[[str], Awaitable[Channel]], submit: Submit
    ) -> None:
        """The idle tick: read the held channels again (with backoff while it fails)."""
        cursors = await self.cursors()
        try:
            for cid in list(self._held):
                await self._channel(cid, cursors.get(cid, self._held[cid] - 1), channel, submit)
        except Exception:  # broad: retried later
            self._failures += 1
            log.warning("discord_retry_held_failed", exc_info=True)
        else:
            self._failures = 0 if not self._held else self._failures + 1
        self._retry_at = time.monotonic() + min(300.0, 2.0 * 2 ** min(self._failures, 7))
