"""``gateway people forget``: erase one person, on every platform they have an account on.

The work is a job (``erasure_jobs``) of steps, each run in bounded batches that move the job
on in the same transaction as their changes, so a run killed at any point is finished by the
next one (``forget`` again with the same person or any of its accounts):

1. ``inbound``: raw inbound payloads that name them as sender (dead letters included).
2. ``ledger``: their usage rows keep cost and tokens, lose account and person.
3. ``messages``: their messages keep their row and ``seq_no`` (history stays dense) but lose
   text, sender and metadata (``metadata.erased``); with them their payloads, edits, the
   session's rolling summaries, a title taken from their first message and web voice notes;
   documents built from files they shared are noted on the job.
4. ``documents``: those documents go (passages, embeddings, summary, the file's bytes when no
   other document uses them, the S3 object too), and answers' frozen citations of them keep
   the reference but lose the quoted passage.
5. ``identity``: schedules they own, tool-approval arguments, feedback, model choices, budget
   notices, link codes, web accounts and single sign-on subjects, their accounts and the
   person; the audit event is written in the same transaction.

What stays is in docs/how-to/erasure.md."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from gateway import audit
from gateway.knowledge.files import FileStorageError, S3Files
from session_store.repos.erasure import ErasureStore, Job, Who
from session_store.repos.knowledge import KnowledgeStore
from session_store.store import Store

log = structlog.get_logger(__name__)

STEPS = ("inbound", "ledger", "messages", "documents", "identity", "done")
DEFAULT_BATCH = 1000

#: one batch of a scan over ids ``(low, high]``
_Batch = Callable[[int, int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Outcome:
    person_id: int
    finished: bool
    counts: dict[str, int]


class _Stopped(Exception):
    """The run's batch allowance is used up (``--max-batches``)."""


async def start(store: Store, person_id: int) -> Job:
    """The person's erasure job: the open one, or a new one for the person and its accounts."""
    erasure = ErasureStore(store.db)
    people = await erasure.people_of(person_id)
    accounts: list[str] = []
    for p in people:
        accounts += await store.people.accounts(p)
    return await erasure.open_job(person_id, Who(tuple(sorted(set(accounts))), people))


async def resume_of(store: Store, account: str) -> Job | None:
    """An unfinished erasure that knows ``account`` (its person may be gone already)."""
    return await ErasureStore(store.db).open_job_of(account)


async def forget(
    store: Store,
    job: Job,
    *,
    batch: int = DEFAULT_BATCH,
    max_batches: int | None = None,
    files: S3Files | None = None,
) -> Outcome:
    """Run ``job`` to its end, or until ``max_batches`` batches were run (then run it
    again to go on)."""
    run = _Run(ErasureStore(store.db), store, job, batch, max_batches, files)
    try:
        await run.all()
    except _Stopped:
        log.info("erasure_paused", job=job.id, step=run.job.step)
        return Outcome(job.person_id, False, run.counts)
    return Outcome(job.person_id, True, run.counts)


class _Run:
    def __init__(
        self,
        erasure: ErasureStore,
        store: Store,
        job: Job,
        batch: int,
        max_batches: int | None,
        files: S3Files | None,
    ) -> None:
        self.erasure = erasure
        self.store = store
        self.job = job
        self.batch = max(1, batch)
        self.left = max_batches
        self.files = files
        self.counts = dict(job.counts)

    def _spend(self) -> None:
        if self.left is not None:
            if self.left <= 0:
                raise _Stopped
            self.left -= 1

    def _add(self, counts: dict[str, int]) -> None:
        for k, v in counts.items():
            self.counts[k] = self.counts.get(k, 0) + v

    async def all(self) -> None:
        while self.job.step != "done":
            step = self.job.step
            if step == "inbound":
                await self._scan(self._payloads, "inbound_events")
            elif step == "ledger":
                await self._scan(self._ledger, "usage_ledger")
            elif step == "messages":
                await self._scan(self._messages, "messages")
            elif step == "documents":
                await self._documents()
            elif step == "identity":
                await self._identity()
                return
            following = STEPS[STEPS.index(step) + 1]
            await self.erasure.advance(self.job.id, following, self.counts)
            self.job = await self.erasure.job(self.job.id)

    async def _scan(self, one: _Batch, table: str) -> None:
        """Batches over id ranges of ``table`` up to its newest row (looked up again at the
        end, so rows written meanwhile are included)."""
        position = self.job.position
        while True:
            end = await self.erasure.last_id(table)
            if position >= end:
                return
            self._spend()
            high = min(position + self.batch, end)
            await one(position, high)
            position = high

    async def _payloads(self, low: int, high: int) -> None:
        self._add({"payloads": await self.erasure.erase_payloads(self.job, low, high)})
        await self.erasure.save_counts(self.job.id, self.counts)

    async def _messages(self, low: int, high: int) -> None:
        self._add(await self.erasure.erase_messages(self.job, low, high))
        await self.erasure.save_counts(self.job.id, self.counts)

    async def _ledger(self, low: int, high: int) -> None:
        self._add({"ledger_rows": await self.erasure.erase_ledger(self.job, low, high)})
        await self.erasure.save_counts(self.job.id, self.counts)

    async def _documents(self) -> None:
        """Each document once (removing one already gone is nothing); idempotent."""
        self.job = await self.erasure.job(self.job.id)
        documents = self.job.documents
        if not documents:
            return
        self._spend()
        self._add({"citations": await self.erasure.erase_citations(documents)})
        kstore = KnowledgeStore(self.store.db)
        for document_id in documents:
            removed = await kstore.remove_document(document_id)
            if removed is None:
                continue
            self._add({"documents": 1})
            if removed.file_removed == "s3" and self.files is not None:
                try:
                    await self.files.delete(removed.sha256)
                except FileStorageError as exc:  # the bytes stay in the bucket: say so
                    log.warning("erasure_file_delete_failed", sha256=removed.sha256, error=str(exc))
                    self._add({"files_left_in_bucket": 1})
        await self.erasure.drop_unused_terms()

    async def _identity(self) -> None:
        self._spend()
        async with self.store.db.transaction() as conn:
            self._add(await self.erasure.erase_identity(conn, self.job.who))
            await self.erasure.finish(conn, self.job.id)
            # no text of theirs: the person's id, how much went, which job
            await audit.record(
                conn,
                "people.forget",
                ("person", self.job.person_id),
                details={"job": self.job.id, "counts": self.counts},
            )
        await self.erasure.save_counts(self.job.id, self.counts)
        log.info("person_forgotten", person_id=self.job.person_id, job=self.job.id)
