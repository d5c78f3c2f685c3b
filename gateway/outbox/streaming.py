"""Streaming answers into the thread while the model writes them.

The final text is always the outbox delivery; what happens here is a best-effort preview:

* ``Streams`` decides per turn whether to stream (``GATEWAY_STREAMING`` and the per-platform
  override, an agent that is ``Streaming``, a transport that is ``Previewing`` or
  ``Drafting``) and opens a ``PreviewStreamer`` as the turn's ``StreamSink``.
* The streamer renders the text so far into parts (``Transport.parts``), posts a preview
  message per part and edits it as the text grows, at most one edit per
  ``preview_interval`` per message, drawing on the chat's one pacing budget, shared with the
  final sends and typing and, while other replicas live, with theirs (``gateway.outbox.pacing``).
  Previews (and a streamed turn's typing renewals) only spend that budget beyond one burst
  slot kept for the final send (``cosmetic_rules``) and never reserve a slot more than
  ``MAX_PREVIEW_WAIT`` ahead: when the model's last token comes, the final edit finds its
  slot free at once, in a Telegram group (20 calls a minute) as in a private chat.
  Each preview's platform id is stored as soon as the platform returns it, so a takeover
  after a crash continues in the same messages.
* A 429 slows the preview down: the shared budget is pushed ``retry_after`` ahead and the
  streamer waits it out. Nothing here ever holds the final text back: when the agent is done
  the streamer stops (an edit in flight finishes) and the turn records the answer, binding
  the previews to it (``Outbox.finish_turn_outbox(previews_after=...)``).
* The delivery of part i then edits preview i into the final text in place, and the last
  part deletes the previews the final text does not need (the parts say so:
  ``finishes_stream``; ``gateway.outbox.stream_finish``). Nothing sends the full text again
  after a partial.

A non-streaming agent (the echo agent) never reaches this module: no preview, no query.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import cast

import structlog

from gateway.agents.base import Agent, Streaming
from gateway.core.domain import ReplyTarget
from gateway.core.errors import DeliveryError, StoreError
from gateway.core.metrics import Metrics
from gateway.core.ports import Drafting, PaceRule, Previewing, Transport
from gateway.outbox.pacing import (
    Budget,
    Rules,
    SharedBudget,
    cosmetic_rules,
    pace_rules,
)
from session_store.repos.previews import PreviewStore

log = structlog.get_logger(__name__)

#: at most this long a preview edit (or a typing renewal) waits for the chat's budget; a later
#: slot is not reserved but tried for when it comes (the next edit carries more text). Kept
#: short: a final send arriving meanwhile waits at most this long for the slot so reserved
MAX_PREVIEW_WAIT = 0.1


def draft_id(session_id: int, after_seq: int) -> int:
    """A turn's Telegram draft id: non-zero, fits 32 bits, the same for every run of the turn."""
    return (session_id * 1_000_003 + after_seq) % 2_147_483_646 + 1


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSettings:
    #: GATEWAY_STREAMING and its per-platform overrides (platform -> on/off)
    enabled: bool = True
    per_platform: Mapping[str, bool] | None = None
    #: GATEWAY_STREAM_EDIT_SECONDS: the least time between two edits of one preview
    edit_seconds: float = 1.0

    def on_for(self, platform: str) -> bool:
        if self.per_platform and platform in self.per_platform:
            return self.per_platform[platform]
        return self.enabled


def _cosmetic(transport: Transport, target: ReplyTarget) -> list[PaceRule]:
    """A preview's rules: the chat's, keeping one burst slot for the final send."""
    return cosmetic_rules(pace_rules(transport, target))


class PreviewStreamer:
    """One turn's ``StreamSink``: shows the answer so far in the thread."""

    def __init__(
        self,
        *,
        transport: Transport,
        target: ReplyTarget,
        session_id: int,
        after_seq: int,
        store: PreviewStore,
        edit_seconds: float,
        metrics: Metrics | None = None,
        budget: Budget | None = None,
    ) -> None:
        self._metrics = metrics
        self._budget: Budget = budget if budget is not None else SharedBudget(store)
        self._started = time.monotonic()
        self._transport = transport
        self._preview = transport if isinstance(transport, Previewing) else None
        self._draft = (
            transport if isinstance(transport, Drafting) and transport.drafts_for(target) else None
        )
        #: one draft per turn: a run that starts over (an edit) or a takeover continues it
        self._draft_id = draft_id(session_id, after_seq)
        self._target = target
        self._session_id = session_id
        self._after_seq = after_seq
        self._store = store
        self._interval = max(
            edit_seconds, self._preview.preview_interval if self._preview is not None else 0.0
        )
        self._text = ""
        self._status = ""
        self._changed = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        #: (platform message id, the part it shows) per part, in order
        self.shown: list[tuple[str, str]] = []
        self._disabled = False
        self._hold_until = 0.0
        #: what the thread saw: edits made, 429s honoured (for logs and tests)
        self.updates = 0
        self.throttled = 0
        self.first_visible: float | None = None

    # --- StreamSink ------------------------------------------------------------------------

    def text(self, delta: str) -> None:
        if delta:
            self._text += delta
            self._changed.set()

    def restart(self) -> None:
        self._text = ""
        self._changed.set()

    def status(self, line: str) -> None:
        self._status = line
        self._changed.set()

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def previews_after(self) -> int | None:
        """The key to bind previews under when the answer is recorded; None: none shown."""
        return self._after_seq if self.shown else None

    @property
    def written(self) -> str:
        """The answer text streamed so far (what a stopped answer keeps)."""
        return self._text

    async def discard(self) -> None:
        """Remove the previews shown (after ``close``): the question they answered was
        deleted. A draft is not a message: it is left to fade, and no final text follows."""
        if self._preview is None or not self.shown:
            return
        parts = list(range(1, len(self.shown) + 1))
        for mid, _ in self.shown:
            try:
                await self._preview.delete_preview(self._target, mid)
                self._count("deleted")
            except DeliveryError as exc:
                log.warning("stream_preview_not_removed", error=str(exc))
        self.shown = []
        try:
            await self._store.forget(self._session_id, self._after_seq, parts)
        except StoreError as exc:
            log.warning("stream_preview_forget_failed", error=str(exc))

    async def start(self) -> None:
        """Pick up previews a dead run of this same turn left (SIGKILL mid-stream)."""
        if self._preview is not None:
            found = await self._store.pending(self._session_id, self._after_seq)
            # parts are numbered from 1 without gaps as long as the old run wrote them
            for n, p in enumerate(found, start=1):
                if p.part_no != n:
                    break
                self.shown.append((p.platform_message_id, ""))
            if found:
                log.info("stream_previews_resumed", previews=len(self.shown))
        self._task = asyncio.create_task(self._run(), name="stream-previews")

    async def close(self) -> None:
        """Stop previewing; an edit in flight completes (never cut a send whose id we would
        lose), waits for pacing or retry-after are dropped."""
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _run(self) -> None:
        last = 0.0
        while not self._stopping:
            await self._changed.wait()
            self._changed.clear()
            if self._stopping:
                return
            pause = max(last + self._interval, self._hold_until) - time.monotonic()
            if pause > 0:
                await self._sleep(pause)
                if self._stopping:
                    return
            try:
                await self._update()
            except StoreError as exc:
                log.warning("stream_preview_store_failed", error=str(exc))
                self._disabled = True
            except Exception:
                log.exception("stream_preview_crashed")
                self._disabled = True
            last = time.monotonic()
            if self._disabled:
                return

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up at once when the turn ends."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wait_stop(), seconds)
        self._changed.set()  # look again at what arrived meanwhile

    async def _wait_stop(self) -> None:
        while not self._stopping:
            await self._changed.wait()
            self._changed.clear()

    def _body(self) -> str:
        if self._text.strip():
            return self._text
        if self._status:
            return f"_{self._status}_"
        return ""

    async def _update(self) -> None:
        body = self._body()
        if not body:
            return
        parts = self._transport.parts(body)
        if self._draft is not None:
            # a native draft: one call with the latest text, nothing to store or delete
            if not await self._paced():
                return
            try:
                await self._draft.send_draft(self._target, self._draft_id, parts[-1])
                self._seen("draft")
                return
            except DeliveryError as exc:
                if not (exc.permanent and self._preview is not None):
                    await self._failed(exc, sending=False)
                    return
                # drafts refused here (the bot has no topic mode, an old server): edits
                log.info("stream_draft_refused", error=str(exc))
                self._draft = None
        if self._preview is None:
            return
        preview = self._preview
        for i, part in enumerate(parts):
            if self._stopping or self._disabled:
                return
            if i < len(self.shown):
                mid, before = self.shown[i]
                if before == part:
                    continue
                if not await self._paced():
                    return
                if not await self._call(preview.edit_preview(self._target, mid, part)):
                    return  # throttled or refused: the next update (if any) tries again
                self.shown[i] = (mid, part)
                self._seen("edited")
                continue
            if not await self._paced():
                return
            try:
                mid = await preview.send_preview(self._target, part)
            except DeliveryError as exc:
                await self._failed(exc, sending=True)
                return
            # stored at once: a takeover after a crash finds it and finishes it
            self.shown.append((mid, part))
            await self._store.add(self._session_id, self._after_seq, i + 1, mid)
            self._seen("sent")
        surplus = self.shown[len(parts) :]
        if surplus and not self._stopping:
            # the text got shorter (the model started over after a tool step)
            for mid, _ in surplus:
                await self._sleep(
                    await self._budget.reserve(_cosmetic(self._transport, self._target))
                )
                if await self._call(preview.delete_preview(self._target, mid)):
                    self._count("deleted")
            del self.shown[len(parts) :]
            await self._store.forget(
                self._session_id,
                self._after_seq,
                list(range(len(parts) + 1, len(parts) + 1 + len(surplus))),
            )

    def _seen(self, op: str) -> None:
        self.updates += 1
        self._count(op)
        if self.first_visible is None:
            self.first_visible = time.monotonic()
            if self._metrics is not None:
                self._metrics.stream_first_text_seconds.labels(self._target.platform).observe(
                    self.first_visible - self._started
                )

    def _count(self, op: str) -> None:
        if self._metrics is not None:
            self._metrics.stream_previews.labels(self._target.platform, op).inc()

    async def _paced(self) -> bool:
        """Wait for this chat's shared budget (every replica); False: skip this update."""
        rules = _cosmetic(self._transport, self._target)
        wait = await self._budget.reserve(rules, MAX_PREVIEW_WAIT)
        if wait > MAX_PREVIEW_WAIT:
            self._count("skipped")
            self._hold_until = time.monotonic() + min(wait, 30.0)
            self._changed.set()
            return False
        if wait > 0:
            await self._sleep(wait)  # the turn's end does not wait for it
        return not self._stopping

    async def _call(self, op: Awaitable[None]) -> bool:
        try:
            await op
            return True
        except DeliveryError as exc:
            await self._failed(exc, sending=False)
            return False

    async def _failed(self, exc: DeliveryError, *, sending: bool) -> None:
        if exc.retry_after is not None:
            # 429: slow down; the shared budget moves for every replica too
            self.throttled += 1
            self._count("throttled")
            self._hold_until = time.monotonic() + float(exc.retry_after)
            self._changed.set()
            log.info(
                "stream_preview_throttled",
                platform=self._target.platform,
                retry_after=exc.retry_after,
            )
            rules = pace_rules(self._transport, self._target)
            await self._budget.hold(rules, float(exc.retry_after))
            return
        if exc.permanent or exc.ambiguous or sending:
            # a send that may have posted cannot be retried (we would not know its id), a
            # refused one will be refused again: the final delivery still comes
            log.warning("stream_preview_stopped", error=str(exc), ambiguous=exc.ambiguous)
            self._count("stopped")
            self._disabled = True
            return
        log.info("stream_preview_failed", error=str(exc))


class Streams:
    """The per-turn decision and the streamers' shared parts (one per gateway)."""

    def __init__(
        self,
        store: PreviewStore,
        transports: Mapping[str, Transport],
        settings: StreamSettings,
        metrics: Metrics | None = None,
        budget: Budget | None = None,
    ) -> None:
        self._metrics = metrics
        #: the chat budgets (``gateway.outbox.pacing.Pacing`` in a gateway; PostgreSQL's by default)
        self._budget: Budget = budget if budget is not None else SharedBudget(store)
        self._store = store
        self._transports = transports
        self._settings = settings
        #: (id of an agent or transport, protocol): (it, whether it implements the protocol)
        self._kinds: dict[tuple[int, type], tuple[object, bool]] = {}

    @property
    def store(self) -> PreviewStore:
        return self._store

    def wanted(self, agent: Agent, platform: str) -> bool:
        if not (self._is(agent, Streaming) and cast(Streaming, agent).streams):
            return False
        if not self._settings.on_for(platform):
            return False
        transport = self._transports.get(platform)
        return self._is(transport, Previewing) or self._is(transport, Drafting)

    def _is(self, thing: object, protocol: type) -> bool:
        """``isinstance(thing, protocol)``, asked once per agent or transport (a runtime
        protocol check walks every member: it was a percent of the CPU per message)."""
        key = (id(thing), protocol)
        found = self._kinds.get(key)
        if found is None or found[0] is not thing:
            found = self._kinds[key] = (thing, isinstance(thing, protocol))
        return found[1]

    async def open(
        self, agent: Agent, *, session_id: int, after_seq: int, target: ReplyTarget
    ) -> PreviewStreamer | None:
        """A started streamer for this turn, or None when this turn answers in one piece."""
        if not self.wanted(agent, target.platform):
            return None
        streamer = PreviewStreamer(
            transport=self._transports[target.platform],
            target=target,
            session_id=session_id,
            after_seq=after_seq,
            store=self._store,
            edit_seconds=self._settings.edit_seconds,
            metrics=self._metrics,
            budget=self._budget,
        )
        try:
            await streamer.start()
        except StoreError as exc:
            log.warning("stream_open_failed", error=str(exc))
            return None
        return streamer

    async def budget(self, rules: Rules, max_wait: float) -> float:
        """A typing renewal's reservation in a streamed turn: cosmetic like a preview (one
        burst slot kept for the final send, no slot further than ``MAX_PREVIEW_WAIT`` ahead).
        Over ``max_wait`` (infinity when only that cap refused it): nothing reserved."""
        limit = min(max_wait, MAX_PREVIEW_WAIT)
        wait = await self._budget.reserve(cosmetic_rules(rules), limit)
        return wait if wait <= limit else math.inf
