"""The composition root's own loops and checks: this process's liveness lock, the knowledge
base's start-up checks and loops, and the gauges refreshed on each scrape."""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from gateway.core.errors import StoreError
from gateway.core.lifecycle.supervisor import Beat, pause
from gateway.core.metrics import Metrics
from gateway.knowledge.embed import EmbeddingError
from gateway.knowledge.service import Knowledge
from gateway.knowledge.summaries import DocumentSummaryWorker
from gateway.outbox.pacing import Pacing
from gateway.runtime import memory
from gateway.runtime.loops import LoopBody, beating
from gateway.turns.minutes import MinutesWorker
from session_store.repos.liveness import ProcessLiveness
from session_store.repos.operator import OperatorStore
from session_store.store import Store

log = structlog.get_logger(__name__)


class LivenessLoop:
    """Keeps this process's liveness lock (its claims carry its id) and tells pacing how
    many peers live."""

    def __init__(self, store: Store, liveness: ProcessLiveness, pacing: Pacing) -> None:
        self.store = store
        self.liveness = liveness
        self.pacing = pacing

    async def ensure(self) -> None:
        self.store.process_id = await self.liveness.ensure()
        self.pacing.set_peers(self.liveness.peers)

    async def run(self, stopping: asyncio.Event, beat: Beat) -> None:
        failures = 0
        while not stopping.is_set():
            beat()
            try:
                await self.ensure()
                failures = 0
            except StoreError as exc:
                failures += 1
                if failures == 1 or failures % 50 == 0:  # retried every 0.1 s: not every one
                    log.warning("process_liveness_failed", error=str(exc), failures=failures)
            await pause(self.liveness.next_check, stopping)


async def knowledge_loops(
    knowledge: Knowledge,
    doc_summaries: DocumentSummaryWorker | None,
    minutes: MinutesWorker | None = None,
) -> list[LoopBody]:
    """The knowledge base's loops, after saying plainly when retrieval is full-text only;
    with them the worker writing closed sessions' minutes into it."""
    try:
        if not await knowledge.store.vector_enabled():
            log.warning(
                "kb_lexical_only",
                reason="this PostgreSQL has no pgvector (the vector extension): knowledge "
                "base retrieval uses full-text search only; install pgvector and run "
                "`gateway migrate` on a fresh database to add embeddings",
            )
        # EMBEDDING_MODEL changed since a base was built: re-embed it through the jobs
        await knowledge.catalog.adopt_model()
    except (StoreError, EmbeddingError) as exc:
        log.warning("kb_check_failed", error=str(exc))
    # supervised like every long-lived loop; ingest jobs are not needed to
    # answer, so the worker is not required for readiness
    loops: list[LoopBody] = [("kb-jobs", beating(knowledge.worker.run), None, False)]
    if doc_summaries is not None:
        loops.append(("kb-summaries", doc_summaries.run, None, False))
    if minutes is not None:  # cold path: not required for readiness either
        loops.append(("minutes", minutes.run, None, False))
    return loops


async def refresh_gauges(metrics: Metrics, store: Store, ops: OperatorStore) -> None:
    memory.refresh(metrics)
    with contextlib.suppress(StoreError):
        counts = await store.outbox.delivery_counts()
        for status in ("pending", "sending", "sent", "failed"):
            metrics.deliveries_by_status.labels(status).set(counts.get(status, 0))
        age = await store.outbox.oldest_pending_delivery_age()
        metrics.oldest_pending_seconds.set(age or 0.0)
        metrics.sessions_active.set(await ops.active_session_count())
