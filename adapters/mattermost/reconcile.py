"""Mattermost's "nothing missed": it has no ack and no replay (platforms.md §3.5 #10), so after
every (re)connect the channels we are in are listed and each one's posts since its cursor are
fetched and submitted (the inbox dedupes what the websocket delivered too). Each channel's
cursor - the last handled ``create_at`` - is saved through the intake, and never moves past a
post whose handling failed (held, with a dead letter, and fetched again on the next resync)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Coroutine, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import httpx
import structlog

from adapters.mattermost.api import MattermostApi, MattermostApiError
from adapters.mattermost.config import MattermostConfig
from adapters.mattermost.extract import (
    PLATFORM,
    BotIdentity,
    ExtractContext,
    Missed,
    missed_since,
    post_of,
    post_order,
)
from gateway.core.domain import Envelope, Rejected
from gateway.core.errors import GatewayError
from gateway.core.lifecycle.supervisor import persist
from gateway.core.ports import Intake

log = structlog.get_logger(__name__)

#: a post's create_at later than this past our clock does not move a channel's cursor
_MAX_CLOCK_SKEW_MS = 3_600_000

_CHANNEL_TYPE_CACHE = 10_000

_T = TypeVar("_T")

#: how long a store call that failed transiently during reconciliation is retried
#: (``gateway.core.lifecycle.supervisor.persist``): right after a database restart the pool's idle
#: connections are dead and fail once each (the pool then reopens them), which must not hold
#: a post until the next resync
_TRANSIENT_RETRY_SECONDS = 1.3

#: a channel's cursor moved by live posts is saved at most this often (the read loop's tick
#: saves what is left): a cursor that lags only makes the next resync fetch again posts the
#: inbox already has, while a write per post was a transaction per message
CURSOR_SAVE_SECONDS = 1.0


class Reconciler:
    """The identity, cursors, holds and reconciliation of one Mattermost server's bot: what
    ``MattermostAdapter`` holds to make "nothing missed" true. It reads through the REST
    client it is given and stores through the intake it is bound to at start."""

    def __init__(self, *, config: MattermostConfig, api: MattermostApi, scope: str) -> None:
        self._config = config
        self._api = api
        self._scope = scope
        self._intake: Intake | None = None
        #: who the bot is, once ``users/me`` answered (``None`` before)
        self.ctx: ExtractContext | None = None
        # channel id -> last seen create_at (ms); bounded by the channels we are in
        self._cursors: dict[str, int] = {}
        # channel id -> a cursor moved in memory, not saved yet; and when each was last saved
        self._unsaved: dict[str, int] = {}
        self._saved_at: dict[str, float] = {}
        # channel id -> {post id: create_at} of posts whose handling failed
        self._held: dict[str, dict[str, int]] = {}
        self._first_start_checked = False
        #: completed reconciliations (one per connection); for observability and tests
        self.reconciliations = 0
        self._resync_at = 0.0
        self._resync_failures = 0
        self._channel_types: OrderedDict[str, str] = OrderedDict()

    def bind(self, intake: Intake) -> None:
        """Store through ``intake`` from now on (the adapter's start)."""
        self._intake = intake

    # --- identity and dead letters ------------------------------------------------------------

    async def resolve_identity(self) -> None:
        me = await self._api.get_me()
        user_id, username = me.get("id"), me.get("username")
        if not isinstance(user_id, str) or not user_id or not isinstance(username, str):
            raise GatewayError("users/me returned no id/username")
        self.ctx = ExtractContext(
            scope=self._scope,
            bot=BotIdentity(user_id=user_id, username=username),
        )
        log.info(
            "mattermost_identity",
            user_id=user_id,
            username=username,
            is_bot=bool(me.get("is_bot")),
            scope=self._scope,
        )

    def require(self) -> tuple[Intake, ExtractContext]:
        if self._intake is None or self.ctx is None:
            raise GatewayError("mattermost adapter not started (identity unknown)")
        return self._intake, self.ctx

    async def record_failure(self, frame: dict[str, Any], exc: BaseException) -> None:
        """Handling ``frame`` raised: hold its post for a retry and leave a dead letter."""
        post = post_of(frame)
        if post is not None and frame.get("event") == "posted":
            self._hold(post)
        intake, _ = self.require()
        try:
            await intake.submit(
                Rejected(
                    platform=PLATFORM, reason=f"handler failed: {type(exc).__name__}: {exc}"[:500]
                ),
                raw=frame,
            )
        except Exception:  # broad: the intake itself is failing; the hold still retries
            log.exception("mattermost_dead_letter_failed")

    # --- cursors ------------------------------------------------------------------------------

    def _cursor_name(self, channel_id: str) -> str:
        return f"{PLATFORM}:{self._scope}:channel:{channel_id}"

    async def _cursor(self, channel_id: str) -> int | None:
        if channel_id in self._cursors:
            return self._cursors[channel_id]
        intake, _ = self.require()
        value = await persist(
            lambda: intake.load_cursor(self._cursor_name(channel_id)),
            what="mattermost_load_cursor",
            deadline=_TRANSIENT_RETRY_SECONDS,
        )
        if value is None:
            return None
        try:
            cursor = int(value)
        except ValueError:
            log.warning("mattermost_cursor_unreadable", channel_id=channel_id)
            return None
        self._cursors[channel_id] = cursor
        return cursor

    async def _set_cursor(self, channel_id: str, value: int, *, lazy: bool = False) -> None:
        """Move a channel's cursor; ``lazy`` (a live post): saved now only when the channel's
        last save is ``CURSOR_SAVE_SECONDS`` old, else by the next tick (``save_cursors``)."""
        held = self._held.get(channel_id)
        if held:
            # never move past a post whose handling failed: it must be fetched again
            value = min(value, min(held.values()))
        if self._cursors.get(channel_id) == value:
            return
        self._cursors[channel_id] = value
        saved = self._saved_at.get(channel_id)
        if lazy and saved is not None and time.monotonic() - saved < CURSOR_SAVE_SECONDS:
            self._unsaved[channel_id] = value
            return
        await self._save_cursor(channel_id, value)

    async def _save_cursor(self, channel_id: str, value: int) -> None:
        self._unsaved.pop(channel_id, None)
        self._saved_at[channel_id] = time.monotonic()
        intake, _ = self.require()
        name = self._cursor_name(channel_id)
        await persist(
            lambda: intake.save_cursor(name, str(value)),
            what="mattermost_save_cursor",
            deadline=_TRANSIENT_RETRY_SECONDS,
        )

    async def save_cursors(self) -> None:
        """Save the cursors live posts moved since their channel's last save (each tick, and
        at stop)."""
        for channel_id, value in list(self._unsaved.items()):
            await self._save_cursor(channel_id, value)

    async def seen(self, post: Mapping[str, Any]) -> None:
        """A post was durably handled: advance its channel's cursor and release a hold."""
        await self._seen_all(post["channel_id"], [post], lazy=True)

    async def _seen_all(
        self,
        channel_id: str,
        posts: Sequence[Mapping[str, Any]],
        *,
        cap: int | None = None,
        lazy: bool = False,
    ) -> None:
        """Like ``seen`` for many posts of one channel, with one cursor write: every post
        in ``posts`` was durably handled (held posts, and ``cap``, still cap the cursor)."""
        newest: int | None = None
        held = self._held.get(channel_id)
        for post in posts:
            if held is not None:
                held.pop(post["id"], None)
            create_at = post.get("create_at")
            if not isinstance(create_at, int) or isinstance(create_at, bool):
                continue
            if not _plausible(create_at):
                # fuzzing: a post dated in the far future moved the cursor past every
                # real post, and reconciliation after the next reconnect missed them all
                log.warning("mattermost_post_time_implausible", channel_id=channel_id)
                continue
            newest = create_at if newest is None else max(newest, create_at)
        if held is not None and not held:
            del self._held[channel_id]
        if newest is None:
            return
        if cap is not None:
            newest = min(newest, cap)
        current = await self._cursor(channel_id)
        await self._set_cursor(
            channel_id, newest if current is None else max(current, newest), lazy=lazy
        )

    def _hold(self, post: Mapping[str, Any]) -> None:
        create_at = post.get("create_at")
        if isinstance(create_at, int):
            self._held.setdefault(post["channel_id"], {})[post["id"]] = create_at
            log.warning("mattermost_post_held", channel_id=post["channel_id"], post_id=post["id"])

    # --- channel types (post_edited/post_deleted carry none) ----------------------------------

    def remember_type(self, channel_id: str, channel_type: str) -> None:
        self._channel_types[channel_id] = channel_type
        self._channel_types.move_to_end(channel_id)
        while len(self._channel_types) > _CHANNEL_TYPE_CACHE:
            self._channel_types.popitem(last=False)

    async def channel_type(self, channel_id: str) -> str | None:
        known = self._channel_types.get(channel_id)
        if known is not None:
            return known
        try:
            channel = await self._api.channel(channel_id)
        except (MattermostApiError, httpx.HTTPError) as exc:
            log.warning("mattermost_channel_lookup_failed", channel_id=channel_id, error=str(exc))
            return None
        kind = channel.get("type")
        if isinstance(kind, str) and kind:
            self.remember_type(channel_id, kind)
            return kind
        return None

    # --- reconciliation -----------------------------------------------------------------------

    async def on_connecting(self) -> None:
        """Before each websocket attempt: know who we are, and on the very first start (no
        cursor saved for any of our channels) mark everything posted so far as history.

        That mark must be taken *before* the websocket opens: every later post then reaches
        us either as an event or through reconciliation, even if this first connection
        drops before its buffered events were read."""
        if self.ctx is None:
            await self.resolve_identity()
        if self._first_start_checked:
            return
        channels = await self._list_channels()
        cursors = [await self._cursor(cid) for cid in channels]
        if not any(c is not None for c in cursors):
            for cid, channel in channels.items():
                last = channel.get("last_post_at")
                await self._set_cursor(cid, (last if isinstance(last, int) else 0) + 1)
            log.info("mattermost_first_start", channels=len(channels))
        self._first_start_checked = True

    async def on_connected(self) -> None:
        if self.ctx is None:
            await self.resolve_identity()
        started = time.monotonic()
        channels = await self._list_channels()
        # one semaphore for the whole reconciliation: at most this many store/REST calls at
        # once, whatever the number of channels (the store is busy with every surface's backlog)
        limit = asyncio.Semaphore(self._config.reconcile_concurrency)
        loaded = await self._bounded(limit, [self._cursor(cid) for cid in channels])
        cursors = dict(zip(channels, loaded, strict=True))
        known = [c for c in cursors.values() if c is not None]
        # A channel without a cursor was joined while we were away: read it from the newest
        # moment we know we were live (with none at all, history is not answered).
        baseline = max(known) if known else None
        counts = await self._bounded(
            None,
            [
                self._reconcile_channel(channel, cursors[cid], baseline, limit=limit)
                for cid, channel in channels.items()
            ],
        )
        self.reconciliations += 1
        # a post this reconciliation could not store is retried at the next tick, not after
        # the backoff that resyncs failing during an outage (before this connection) built up
        self._resync_failures = 0
        self._resync_at = 0.0
        log.info(
            "mattermost_reconciled",
            channels=len(channels),
            submitted=sum(counts),
            seconds=round(time.monotonic() - started, 3),
        )

    @staticmethod
    async def _bounded(
        limit: asyncio.Semaphore | None, calls: Sequence[Coroutine[Any, Any, _T]]
    ) -> list[_T]:
        """Run ``calls`` concurrently (each under ``limit`` when given) and wait for *all*
        of them - none is cancelled half-way, so holds and cursors stay consistent - then
        raise the first failure, if any."""

        async def one(call: Coroutine[Any, Any, _T]) -> _T:
            if limit is None:
                return await call
            async with limit:
                return await call

        results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return cast("list[_T]", results)

    async def _list_channels(self) -> dict[str, dict[str, Any]]:
        channels: dict[str, dict[str, Any]] = {}
        teams = await self._api.my_teams()
        listings = [
            await self._api.my_team_channels(t["id"]) for t in teams if isinstance(t.get("id"), str)
        ]
        if not teams:
            # a bot in no team can still be in DMs and group DMs
            listings.append(await self._api.my_channels())
        for listing in listings:
            for channel in listing:
                cid = channel.get("id")
                if not isinstance(cid, str) or not cid:
                    continue
                if isinstance(channel.get("delete_at"), int) and channel["delete_at"] > 0:
                    continue  # archived: nothing new can be posted there
                channels[cid] = channel
                if isinstance(channel.get("type"), str):
                    self.remember_type(cid, channel["type"])
        return channels

    async def _reconcile_channel(
        self,
        channel: Mapping[str, Any],
        cursor: int | None,
        baseline: int | None,
        *,
        limit: asyncio.Semaphore | None = None,
    ) -> int:
        """Submit the posts of one channel created at or after its cursor; returns how many
        were submitted. The cursor means "every post created before it was handled".

        The posts are submitted by conversation (session key): each conversation's posts in
        creation order, different conversations concurrently (under ``limit``). The cursor
        is saved once, after all of them: to the newest post stored, but never past a post
        whose handling failed (``_hold``), so a crash half-way only re-fetches (the inbox
        dedupes) and a failed post is fetched again."""
        cid = str(channel["id"])
        last_post_at = channel.get("last_post_at")
        last = last_post_at if isinstance(last_post_at, int) else None
        if cursor is None:
            if baseline is None:
                # no reference point at all: start from now, do not answer history
                await self._set_cursor(cid, (last or 0) + 1)
                return 0
            cursor = baseline
        if last is not None and last < cursor and cid not in self._held:
            return 0  # nothing was created since; skip the request
        intake, ctx = self.require()
        channel_type = channel.get("type") if isinstance(channel.get("type"), str) else None
        channel_type = channel_type or self._channel_types.get(cid) or ""
        team_id = channel.get("team_id") if isinstance(channel.get("team_id"), str) else None
        if limit is None:
            posts, complete = await self._fetch_missed(cid, cursor)
        else:
            async with limit:
                posts, complete = await self._fetch_missed(cid, cursor)
        posts.sort(key=post_order)
        # one ordered run per conversation: the order of a session's messages is the order
        # they are stored in, so only different sessions may be submitted concurrently
        runs: dict[object, list[tuple[Mapping[str, Any], Missed]]] = {}
        for post in posts:
            if not isinstance(post.get("id"), str) or post.get("channel_id") != cid:
                continue
            missed = missed_since(
                post, cursor=cursor, ctx=ctx, channel_type=channel_type, team_id=team_id
            )
            if not missed.events:
                continue
            runs.setdefault(_run_of(post, missed), []).append((post, missed))
        stored: list[Mapping[str, Any]] = []

        async def submit_run(run: list[tuple[Mapping[str, Any], Missed]]) -> int:
            submitted = 0
            for post, missed in run:
                count, ok = await self._submit_missed(intake, post, missed, channel_type)
                submitted += count
                if missed.new and ok:
                    stored.append(post)
            return submitted

        # A failed post is recorded inside its run (dead letter + hold) and the run goes on.
        # If a run ends early (cancelled: leadership lost), the posts behind its last one
        # were not stored, although later ones in other runs may have been: the cursor is
        # then left where it was (all of them are fetched again; the inbox dedupes).
        counts = await self._bounded(limit, [submit_run(run) for run in runs.values()])
        # paging stopped short of the cursor: posts between it and the oldest one read may be
        # missing, so the cursor stays (what was stored is deduped when read again)
        await self._seen_all(cid, stored, cap=None if complete else cursor)
        return sum(counts)

    async def _fetch_missed(self, cid: str, cursor: int) -> tuple[list[dict[str, Any]], bool]:
        """The posts of a channel that may carry something since ``cursor``, and whether
        that is all of them. One since-query; only when it answered the server's cap (which
        posts it then picked is not defined) the channel's pages too, newest first, back to
        the cursor (at most ``max_pages``; if that is not enough: ``False``)."""
        # since is exclusive on UpdateAt (server GetPostsSince): cursor - 1 also returns posts
        # created in the cursor's own millisecond; re-submitting one is deduped by the inbox.
        since = cursor - 1
        posts = await self._api.posts_since(cid, since)
        hits = sum(1 for p in posts if _int(p.get("update_at")) > since)
        if hits < self._config.since_limit:
            return posts, True
        by_id = {p["id"]: p for p in posts if isinstance(p.get("id"), str)}
        log.info("mattermost_reconcile_paging", channel_id=cid, since_posts=hits)
        for page in range(self._config.max_pages):
            listed, roots = await self._api.posts_page(cid, page, self._config.page_size)
            for post in (*listed, *roots):
                if isinstance(post.get("id"), str):
                    by_id.setdefault(post["id"], post)
            if not listed or min(_int(p.get("create_at")) for p in listed) < cursor:
                return list(by_id.values()), True
        log.warning(
            "mattermost_reconcile_pages_exhausted",
            channel_id=cid,
            pages=self._config.max_pages,
            posts=len(by_id),
        )
        return list(by_id.values()), False

    async def _submit_missed(
        self, intake: Intake, post: Mapping[str, Any], missed: Missed, channel_type: str
    ) -> tuple[int, bool]:
        """Submit what one missed post yields; returns how many were stored and whether all
        were. A failure leaves a dead letter and holds a new post (its channel's cursor
        stays before it, so it is fetched again); once all of a new post's events are
        stored, the caller may move the cursor past it (``_seen_all``)."""
        raw = {"source": "reconcile", "channel_type": channel_type, "post": post}
        stored = 0
        failed = False
        for extracted in missed.events:
            try:
                await persist(
                    partial(intake.submit, extracted, raw=raw),
                    what="mattermost_submit",
                    deadline=_TRANSIENT_RETRY_SECONDS,
                )
            except Exception as exc:  # broad: same isolation as the websocket path
                log.exception(
                    "mattermost_reconcile_submit_failed",
                    channel_id=post["channel_id"],
                    post_id=post["id"],
                )
                if missed.new and not failed:
                    await self.record_failure({"event": "posted", "data": {"post": post}}, exc)
                failed = True
                continue
            stored += 1
        return stored, not failed

    async def on_tick(self) -> None:
        """Idle tick of the read loop: save the cursors live posts moved, and retry held posts
        (their handling failed) with backoff."""
        if self._unsaved:
            await self.save_cursors()
        if not self._held or time.monotonic() < self._resync_at:
            return
        try:
            limit = asyncio.Semaphore(self._config.reconcile_concurrency)
            for cid, held in list(self._held.items()):
                channel = {"id": cid, "type": self._channel_types.get(cid, "")}
                await self._reconcile_channel(
                    channel, await self._cursor(cid), min(held.values()), limit=limit
                )
        except Exception:  # broad: a failed resync is retried later, the stream goes on
            self._resync_failures += 1
            log.exception("mattermost_resync_failed")
        else:
            self._resync_failures = 0 if not self._held else self._resync_failures + 1
        delay = min(300.0, 5.0 * 2 ** min(self._resync_failures, 6))
        self._resync_at = time.monotonic() + delay


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _plausible(create_at: int) -> bool:
    """A post time that may move a cursor: positive and not far in our future."""
    return 0 < create_at <= time.time() * 1000 + _MAX_CLOCK_SKEW_MS


def _run_of(post: Mapping[str, Any], missed: Missed) -> object:
    """Which ordered run a missed post belongs to: its conversation (session key) when it
    yields a message or an edit, else (ignored, rejected, deleted) a run of its own."""
    for event in missed.events:
        if isinstance(event, Envelope):
            return event.key
    return ("post", post["id"])
