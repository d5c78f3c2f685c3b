"""The ingest job worker: parse -> chunk -> embed -> ready, three tries with backoff, claimed
across replicas with a lease; the thread that shared a file is told how it went."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Protocol

import structlog

from gateway.core.errors import GatewayError, LeaseLost, StoreError
from gateway.core.lifecycle.guards import renewal_interval
from gateway.knowledge.chunk import chunk_blocks
from gateway.knowledge.citations import document_note
from gateway.knowledge.config import FileRejected
from gateway.knowledge.embed import EmbeddingError
from gateway.knowledge.files import FileStorageError
from gateway.knowledge.mail import MailFile
from gateway.knowledge.parse import ParseError, parse_document
from session_store.repos.knowledge import DocumentState, IngestJob, NewChunk

if TYPE_CHECKING:
    from gateway.core.hub import Signal
    from gateway.knowledge.config import Announce, KnowledgeSettings
    from gateway.knowledge.embed import Embedder
    from gateway.knowledge.files import S3Files
    from session_store.repos.knowledge import KnowledgeStore

log = structlog.get_logger(__name__)


class _Models(Protocol):
    async def switch_model(self, name: str) -> None: ...


class _Counts(Protocol):
    async def flush_access(self) -> None: ...


class IngestHost(Protocol):
    """What the worker uses of ``gateway.knowledge.service.Knowledge``."""

    store: KnowledgeStore
    embedder: Embedder
    settings: KnowledgeSettings
    files: S3Files | None
    announce: Announce | None
    owner: str
    wake: Signal
    #: wakes the summary worker (``gateway.knowledge.summaries``) when a document is ready
    summary_wake: Signal

    @property
    def catalog(self) -> _Models: ...

    @property
    def turns(self) -> _Counts: ...

    async def add(
        self, name: str, data: bytes, *, kb: str = ..., media_type: str | None = None
    ) -> object: ...


class IngestWorker:
    """Runs the durable ingest jobs of one ``Knowledge`` (``k``)."""

    def __init__(self, knowledge: IngestHost) -> None:
        self.k = knowledge

    async def run(self, stopping: asyncio.Event) -> None:
        """Claim and run ingest jobs until ``stopping``; survives failures of one job and of
        the database."""
        last_flush = time.monotonic()
        while not stopping.is_set():
            try:
                busy = await self.process_one()
            except StoreError as exc:
                log.warning("kb_job_store_error", error=str(exc))
                busy = False
            except Exception:
                log.exception("kb_job_crashed")
                busy = False
            if time.monotonic() - last_flush >= self.k.settings.flush_seconds:
                last_flush = time.monotonic()
                try:
                    await self.k.turns.flush_access()
                except StoreError as exc:
                    log.warning("kb_access_flush_failed", error=str(exc))
            if not busy:
                await self.k.wake.wait(self.k.settings.poll_seconds)

    async def process_one(self) -> bool:
        """Run one due job; ``False`` when there was none."""
        s = self.k.settings
        job = await self.k.store.claim_job(owner=self.k.owner, lease_seconds=s.lease_seconds)
        if job is None:
            return False
        doc = job.document
        structlog.contextvars.bind_contextvars(document_id=doc.id, attempt=doc.attempts)
        try:
            if doc.attempts > s.max_attempts:
                reason = doc.error or "the worker stopped mid-job"
                await self.k.store.fail_job(
                    job, f"gave up after {s.max_attempts} tries: {reason}", retry_in=None
                )
                log.warning("kb_job_gave_up", error=reason)
                return True
            if job.embedding_model != self.k.embedder.model:
                # the base was built with another model: switch it (every document is queued
                # again, this one included) rather than mix two models in one index
                await self.k.catalog.switch_model(doc.kb_name)
                log.info("kb_model_switched", kb=doc.kb_name, model=self.k.embedder.model)
                return True
            await self._ingest(job)
            log.info("kb_document_ready", name=doc.name)
            self.k.summary_wake.set()
            await self._tell(doc.id)
        except ParseError as exc:
            await self.k.store.fail_job(job, str(exc), retry_in=None)
            log.info("kb_document_failed", error=str(exc))
            await self._tell(doc.id)
        except LeaseLost:
            log.warning("kb_job_lease_lost")
        except (EmbeddingError, FileStorageError) as exc:
            await self._retry_or_fail(job, str(exc), transient=exc.transient)
        except StoreError:
            raise  # the lease runs out and the job is tried again
        except Exception as exc:
            log.exception("kb_job_failed")
            await self._retry_or_fail(job, f"{type(exc).__name__}: {exc}", transient=True)
        finally:
            structlog.contextvars.unbind_contextvars("document_id", "attempt")
        return True

    async def _retry_or_fail(self, job: IngestJob, error: str, *, transient: bool) -> None:
        attempts = job.document.attempts
        if transient and attempts < self.k.settings.max_attempts:
            delay = self.k.settings.backoff_seconds * 4 ** (attempts - 1)
            await self.k.store.fail_job(job, error, retry_in=delay)
            log.warning("kb_job_retry", error=error, retry_in=delay)
        else:
            if transient:
                error = f"gave up after {attempts} tries: {error}"
            await self.k.store.fail_job(job, error, retry_in=None)
            log.warning("kb_document_failed", error=error)
            await self._tell(job.document.id)

    async def _tell(self, document_id: int) -> None:
        """Tell the thread that shared the document how it went (if no turn told it)."""
        if self.k.announce is None or document_id < 0:
            return
        doc = await self.k.store.get_document(document_id)
        if doc is None or not doc.kb_name.startswith("thread:"):
            return
        if await self.k.store.take_notify(doc.id) is None:
            return
        try:
            await self.k.announce(doc.kb_name.removeprefix("thread:"), document_note(doc))
        except GatewayError as exc:  # a closed session, a platform gone: logged, not retried
            log.warning("kb_announce_failed", document_id=doc.id, error=str(exc))

    async def _ingest(self, job: IngestJob) -> None:
        doc = job.document
        state: list[DocumentState] = ["parsing"]

        async def keep_lease() -> None:
            while True:
                await asyncio.sleep(renewal_interval(self.k.settings.lease_seconds))
                await self.k.store.job_progress(
                    job, state[0], lease_seconds=self.k.settings.lease_seconds
                )

        renew = asyncio.create_task(keep_lease(), name="kb-job-lease")
        try:
            parsed = await asyncio.to_thread(
                parse_document, doc.name, await self._bytes(job), doc.media_type
            )
            # an e-mail's attachments: documents of their own, in the same knowledge base
            # (added before the e-mail is done: a retried job adds the same files, once)
            for inner in parsed.attachments:
                await self._add_inner(doc.kb_name, inner)
            chunks = chunk_blocks(parsed.blocks)
            state[0] = "embedding"
            await self.k.store.job_progress(
                job, "embedding", lease_seconds=self.k.settings.lease_seconds
            )
            vectors: list[list[float]] | None = None
            if await self.k.store.vector_enabled():
                vectors = await self.k.embedder.embed(
                    [f"{c.section}\n{c.text}" if c.section else c.text for c in chunks]
                )
            rows = [
                NewChunk(
                    ordinal=c.ordinal,
                    page=c.page,
                    section=c.section,
                    content=c.text,
                    tokens=c.tokens,
                    embedding=None if vectors is None else vectors[i],
                )
                for i, c in enumerate(chunks)
            ]
            if renew.done():
                renew.result()  # LeaseLost
            await self.k.store.finish_job(job, rows, pages=parsed.pages)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseLost, StoreError):
                await renew

    async def _add_inner(self, kb: str, inner: MailFile) -> None:
        try:
            await self.k.add(inner.name, inner.data, kb=kb, media_type=inner.media_type)
        except FileRejected as exc:
            log.info("kb_attachment_skipped", name=inner.name, reason=str(exc))

    async def _bytes(self, job: IngestJob) -> bytes:
        if job.content is not None:
            return job.content
        if self.k.files is None:
            raise FileStorageError(
                "the file is in S3-compatible storage but GATEWAY_FILES_S3_URL is not set",
                transient=False,
            )
        return await self.k.files.get(job.document.sha256)
