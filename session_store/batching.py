"""Group commit for ``Store.ingest``: concurrent ingests share one transaction and one WAL
flush, without weakening ack-after-commit.

Every caller's ``await`` returns only after the transaction holding its message committed, and
each message is stored by exactly the statement ``Store.ingest`` runs (``INGEST_MESSAGE`` with
the same parameters), in arrival order per session, so dedupe, the dense ``seq_no`` and the
results are the same as unbatched. What changes is only how many commits (fsyncs) they cost.

No delay is added to form a batch: at most ``max_inflight`` transactions run at once, and the
callers that arrive while they run form the next batch. A lone caller runs the plain
single-statement ingest (autocommit, one round trip), so light load pays nothing extra.

A failing message must not fail the others: when any statement of a batch fails, the batch is
rolled back (nothing of it was committed, nobody was answered) and every message of it is
retried alone through ``Store.ingest``, where only the bad one fails. A failure of the COMMIT
itself leaves the outcome unknown, so every caller of that batch gets ``StoreError``, exactly
what an unbatched caller gets when its commit is lost (the platform retries; dedupe absorbs a
commit that did land).

Batches lock session rows in key order, so two concurrent batches cannot deadlock on each
other's sessions (and if anything else makes a batch fail, the retry-alone path recovers).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog

from gateway.domain import Envelope, EventKind, Ignored, Rejected
from gateway.errors import StoreError
from session_store import queries as q
from session_store.records import IngestResult
from session_store.store import Store, ingest_message_args, ingest_message_result

log = structlog.get_logger(__name__)


class _CommitUnknown(Exception):
    """COMMIT failed: the batch may or may not be stored."""


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
        self._closed = False
        #: batch sizes committed so far (how much grouping the load produced)
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
        if len(self._flushers) < self._max_inflight:
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
                            exc if isinstance(exc, Exception) else StoreError("batch cancelled")
                        )
                if not isinstance(exc, Exception):
                    raise

    async def _run(self, batch: list[_Item]) -> None:
        if len(batch) == 1:
            await self._alone(batch[0])
            return
        # session-key order (stable: arrival order within a session) = lock order
        batch.sort(key=lambda it: it.order)
        async with self._store.connection() as conn:
            try:
                rows = await self._in_one_transaction(conn, batch)
            except _CommitUnknown as exc:
                # the commit may or may not have landed: tell every caller, as unbatched
                # would (the platform retries; dedupe absorbs a commit that did land)
                error = StoreError(f"commit of an ingest batch failed: {exc}")
                for item in batch:
                    if not item.future.done():
                        item.future.set_exception(error)
                return
        if rows is None:
            log.warning("ingest_batch_failed_retrying_alone", size=len(batch))
            for item in batch:
                await self._alone(item)
            return
        self.batches += 1
        self.batched_messages += len(batch)
        for item, row in zip(batch, rows, strict=True):
            if not item.future.done():
                item.future.set_result(ingest_message_result(row))

    async def _in_one_transaction(
        self, conn: asyncpg.Connection, batch: list[_Item]
    ) -> list[asyncpg.Record | None] | None:
        """The batch's rows after COMMIT; None when a statement failed (rolled back)."""
        tx = conn.transaction()
        await tx.start()
        rows: list[asyncpg.Record | None] = []
        try:
            for item in batch:
                rows.append(await conn.fetchrow(q.INGEST_MESSAGE, *item.args))
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ValueError, TypeError) as exc:
            # a bad value (driver encoding) or a failed statement: nothing is committed
            log.debug("ingest_batch_statement_failed", error=str(exc))
            with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                await tx.rollback()
            return None
        try:
            await tx.commit()
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            raise _CommitUnknown(str(exc)) from exc
        return rows

    async def _alone(self, item: _Item) -> None:
        try:
            result = await self._store.ingest(item.envelope, raw=item.raw)
        except Exception as exc:  # noqa: BLE001 - handed to its caller, as unbatched raises it
            if not item.future.done():
                item.future.set_exception(exc)
            return
        if not item.future.done():
            item.future.set_result(result)
