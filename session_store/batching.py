"""Group commit for ``Store.ingest``: concurrent ingests share one statement, one transaction
and one WAL flush, without weakening ack-after-commit.

Every caller's ``await`` returns only after the statement holding its message committed.
``queries.INGEST_MESSAGES_BATCH`` is ``INGEST_MESSAGE`` for many messages at once, with the
same parameters: the same inbox dedupe on both keys, the same session get-or-create, the same
dense ``seq_no`` in arrival order per session, the same answer/context decision, the same
results (``tests/store/test_batching.py`` compares them with unbatched ingests). What changes
is how many round trips and commits (fsyncs) they cost.

No delay is added to form a batch: at most ``max_inflight`` statements run at once, and the
callers that arrive while they run form the next batch. A lone caller runs the plain
single-message statement, so light load pays nothing extra.

A failing message must not fail the others: when the server refuses a batch, the statement was
rolled back whole (nobody was answered), and every message of it is retried alone through
``Store.ingest``, where only the bad one fails. When the connection breaks mid-statement the
outcome is unknown, so every caller of that batch gets ``StoreError``, exactly what an
unbatched caller gets when its commit is lost (the platform retries; dedupe absorbs a commit
that did land).

A batch locks inbox keys and session rows in session-key order, so two concurrent batches
cannot deadlock on each other (and if anything else makes one fail, the retry-alone path
recovers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog

from gateway.domain import Envelope, EventKind, Ignored, Rejected
from gateway.errors import StoreError
from session_store import queries as q
from session_store.records import IngestResult
from session_store.store import Store, ingest_message_args, ingest_message_result, message_key

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class _Item:
    envelope: Envelope
    raw: Mapping[str, Any] | None
    args: tuple[Any, ...]
    order: tuple[str, str, str, str]
    future: asyncio.Future[IngestResult] = field(repr=False)


class IngestBatcher:
    """``await batcher.ingest(extracted, raw=...)`` behaves like ``store.ingest``."""

    def __init__(self, store: Store, *, max_batch: int = 128, max_inflight: int = 2) -> None:
        if max_batch < 1 or max_inflight < 1:
            raise ValueError("max_batch and max_inflight must be at least 1")
        self._store = store
        self._max_batch = max_batch
        self._max_inflight = max_inflight
        self._pending: list[_Item] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self._active = 0
        self._closed = False
        #: batches committed and the messages in them (how much grouping the load produced)
        self.batches = 0
        self.batched_messages = 0

    async def ingest(
        self, extracted: Envelope | Ignored | Rejected, *, raw: Mapping[str, Any] | None
    ) -> IngestResult:
        if self._closed:
            raise StoreError("ingest batcher is closed")
        if isinstance(extracted, Ignored | Rejected) or extracted.kind is not EventKind.MESSAGE:
            # rare, and several statements each: not worth batching
            return await self._store.ingest(extracted, raw=raw)
        key = extracted.key
        item = _Item(
            envelope=extracted,
            raw=raw,
            args=ingest_message_args(extracted, raw),
            order=(key.platform, key.scope, key.chat_id, key.thread_id or ""),
            future=asyncio.get_running_loop().create_future(),
        )
        self._pending.append(item)
        if self._active < self._max_inflight:
            # counted here, uncounted by the loop itself the moment it sees nothing pending
            # (no await in between), so a caller never queues behind a loop that is leaving
            self._active += 1
            task = asyncio.create_task(self._flush_loop(), name="ingest-batch-flush")
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)
        return await item.future

    async def close(self) -> None:
        """Stop accepting work and wait for the batches in flight (they are short)."""
        self._closed = True
        while self._flushers:
            await asyncio.gather(*list(self._flushers), return_exceptions=True)

    async def _flush_loop(self) -> None:
        # keep this slot busy while callers keep arriving: the next batch is whatever queued
        # up during the previous one
        try:
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                try:
                    await self._run(batch)
                except BaseException as exc:
                    # never leave a caller waiting forever, whatever happened
                    for item in batch:
                        if not item.future.done():
                            item.future.set_exception(
                                exc if isinstance(exc, Exception) else StoreError("cancelled")
                            )
                    if not isinstance(exc, Exception):
                        raise
        finally:
            self._active -= 1

    async def _run(self, batch: list[_Item]) -> None:
        if len(batch) == 1:
            await self._alone(batch[0])
            return
        # a key seen earlier in the same batch: the later one is a duplicate whatever happens
        # to the earlier one (stored now, or already stored before)
        seen: set[tuple[str, str, str]] = set()
        unique: list[_Item] = []
        for item in batch:
            env = item.envelope
            # the inbox's two unique keys: (platform, message key) and (platform, event id)
            scoped = {(env.key.platform, "message", message_key(env))}
            if env.event_id is not None:
                scoped.add((env.key.platform, "event", env.event_id))
            if scoped & seen:
                item.future.set_result(IngestResult(status="duplicate"))
                continue
            seen |= scoped
            unique.append(item)
        if len(unique) == 1:
            await self._alone(unique[0])
            return
        # session-key order (stable: arrival order within a session) = lock order
        unique.sort(key=lambda it: it.order)
        columns = [list(col) for col in zip(*(it.args for it in unique), strict=True)]
        try:
            async with self._store.connection() as conn:
                rows = await conn.fetch(q.INGEST_MESSAGES_BATCH, *columns)
        except (StoreError, asyncpg.DataError, ValueError, TypeError) as exc:
            # the server refused the statement (or a value could not be encoded): it was
            # rolled back whole, nobody was answered; each message alone, only bad ones fail
            log.warning("ingest_batch_failed_retrying_alone", size=len(unique), error=str(exc))
            for item in unique:
                await self._alone(item)
            return
        except (asyncpg.InterfaceError, OSError) as exc:
            # the connection broke mid-statement: it may or may not have committed. Tell every
            # caller, as an unbatched caller would hear (the platform retries; dedupe absorbs
            # a commit that did land)
            error = StoreError(f"ingest batch outcome unknown: {exc}")
            for item in unique:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        self.batches += 1
        self.batched_messages += len(unique)
        stored = {row["ord"]: row for row in rows}
        for position, item in enumerate(unique, start=1):
            if not item.future.done():
                item.future.set_result(ingest_message_result(stored.get(position)))

    async def _alone(self, item: _Item) -> None:
        try:
            result = await self._store.ingest(item.envelope, raw=item.raw)
        except Exception as exc:  # noqa: BLE001 - handed to its caller, as unbatched raises it
            if not item.future.done():
                item.future.set_exception(exc)
            return
        if not item.future.done():
            item.future.set_result(result)
