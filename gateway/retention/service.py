"""The retention loop: on one replica (the holder of the ``retention`` leader lock), on the cold
path, every ``interval``, each kind of stored data past its window is dropped in bounded
batches, whole inbox months where it can. It also keeps the inbox's and the audit log's month
partitions made ahead (the audit log's maintenance is one of its steps).

Each step runs on its own: one that fails (the database away, a lock not granted in time, a
full export disk) is counted and logged, and the next one runs; the next run tries again.

Windows (invariant: retention never breaks dedupe): a redelivery is refused by its keys in
``inbound_keys``, kept ``dedupe_days``; a payload is dropped after ``payload_days`` with the
row and keys staying; a whole inbox month goes only once all of it is past every inbox window
(payloads, dead letters, dedupe), so nothing a window still reads is in it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.audit.maintenance import AuditMaintenance
from gateway.core.config_file import ConfigFile
from gateway.core.errors import StoreError
from gateway.core.lifecycle.leadership import LeaderElection
from gateway.core.settings import Settings
from gateway.retention.policy import RetentionPolicy, retention_policy
from session_store.db import Database
from session_store.repos.retention import RetentionStore

log = structlog.get_logger(__name__)

#: months of inbox partitions kept ready after the current one
AHEAD_MONTHS = 2
#: rows per batch (each batch is one short transaction)
BATCH = 2000
#: ids per payload batch (a range of the id sequence: bounded whatever is in it)
ID_SPAN = 10_000
#: batches per step and run: the rest waits for the next run
MAX_BATCHES = 500
#: closed sessions exported and deleted per run
SESSIONS_PER_RUN = 200

KINDS = ("payloads", "dead_letters", "keys", "closed_sessions", "usage")


class RetentionMetrics:
    """``gateway_retention_*``: what retention removed, when it last ran, what failed."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.removed = Counter(
            "gateway_retention_rows_removed",
            "Rows removed by retention, by kind (payloads: raw payloads dropped, the rows "
            "stay; dead_letters, keys: dedupe keys, closed_sessions: sessions exported and "
            "deleted, usage)",
            ["kind"],
            registry=registry,
        )
        self.partitions = Counter(
            "gateway_retention_partitions_dropped",
            "Whole month partitions dropped by retention, by table (inbound_events, audit_events)",
            ["table"],
            registry=registry,
        )
        self.last_run = Gauge(
            "gateway_retention_last_run_timestamp_seconds",
            "When the last retention run on this replica ended (Unix time; 0: none yet)",
            registry=registry,
        )
        self.errors = Counter(
            "gateway_retention_errors",
            "Retention steps that failed, by step (the run goes on with the next step)",
            ["step"],
            registry=registry,
        )


@dataclass
class Report:
    """What one run removed (or, for ``plan``, would remove now)."""

    at: datetime
    counts: dict[str, int] = field(default_factory=dict)
    partitions: list[str] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "counts": self.counts,
            "partitions": self.partitions,
            "exported": self.exported,
            "errors": self.errors,
        }


def _days_before(now: datetime, days: int) -> datetime | None:
    return None if days <= 0 else now - timedelta(days=days)


def _months_before(now: datetime, months: int) -> datetime | None:
    if months <= 0:
        return None
    index = now.year * 12 + now.month - 1 - months
    day = min(now.day, 28)
    return now.replace(year=index // 12, month=index % 12 + 1, day=day)


class Retention:
    def __init__(
        self,
        db: Database,
        policy: RetentionPolicy,
        *,
        registry: CollectorRegistry | None = None,
        dsn: str | None = None,
    ) -> None:
        self.store = RetentionStore(db)
        self.policy = policy
        self.audit = AuditMaintenance(db, retention_days=policy.audit_days)
        self.metrics = RetentionMetrics(registry or CollectorRegistry())
        self._dsn = dsn
        #: where the payload pass stopped: ids below it hold no payload past the window
        self._payload_cursor: int | None = None
        self.last_run: datetime | None = None

    # --- what is past its window --------------------------------------------------------

    def cutoffs(self, now: datetime) -> dict[str, datetime | None]:
        p = self.policy
        return {
            "payloads": _days_before(now, p.payload_days),
            "dead_letters": _days_before(now, p.dead_letter_days),
            "keys": _days_before(now, p.dedupe_days),
            "closed_sessions": _months_before(now, p.closed_session_months),
            "usage": _days_before(now, p.usage_days),
            "inbox_months": _days_before(now, p.inbox_days()),
            "audit_months": _days_before(now, p.audit_days),
        }

    async def expired_inbox_partitions(self, now: datetime) -> list[str]:
        cutoff = self.cutoffs(now)["inbox_months"]
        if cutoff is None:
            return []
        return [p.name for p in await self.store.inbox_partitions() if _midnight(p.ends) <= cutoff]

    async def plan(self, now: datetime | None = None) -> Report:
        """What a run would remove now (the counts; partitions by name)."""
        now = now or datetime.now(UTC)
        report = Report(at=now)
        cutoffs = self.cutoffs(now)
        for kind in KINDS:
            before = cutoffs[kind]
            report.counts[kind] = 0 if before is None else await self.store.count(kind, before)
        report.partitions = await self.expired_inbox_partitions(now)
        audit_before = cutoffs["audit_months"]
        if audit_before is not None:
            report.partitions += await self.audit.expired(audit_before)
        return report

    # --- one run ------------------------------------------------------------------------

    async def once(self, now: datetime | None = None) -> Report:
        """Run every step once; a failing step is recorded and the next one runs."""
        now = now or datetime.now(UTC)
        report = Report(at=now)
        steps: list[tuple[str, Callable[[datetime, Report], Awaitable[None]]]] = [
            ("partitions", self._partitions),
            ("payloads", self._payloads),
            ("dead_letters", self._batched("dead_letters", self.store.delete_dead_letters)),
            ("keys", self._batched("keys", self.store.delete_keys)),
            ("closed_sessions", self._closed_sessions),
            ("usage", self._batched("usage", self.store.delete_usage)),
            ("audit", self._audit),
        ]
        for name, step in steps:
            try:
                await step(now, report)
            except (StoreError, OSError, ValueError) as exc:
                report.errors[name] = str(exc)
                self.metrics.errors.labels(name).inc()
                log.warning("retention_step_failed", step=name, error=str(exc))
        for kind, n in report.counts.items():
            if n:
                self.metrics.removed.labels(kind).inc(n)
        self.last_run = datetime.now(UTC)
        self.metrics.last_run.set(self.last_run.timestamp())
        if any(report.counts.values()) or report.partitions or report.errors:
            log.info("retention_run", **report.as_json())
        return report

    async def _partitions(self, now: datetime, report: Report) -> None:
        made = await self.store.ensure_partitions(AHEAD_MONTHS)
        if made:
            log.info("inbox_partitions_created", count=made)
        for name in await self.expired_inbox_partitions(now):
            if await self.store.drop_partition(name):
                report.partitions.append(name)
                self.metrics.partitions.labels("inbound_events").inc()

    async def _payloads(self, now: datetime, report: Report) -> None:
        before = self.cutoffs(now)["payloads"]
        report.counts["payloads"] = 0
        span = await self.store.id_span() if before is not None else None
        if before is None or span is None:
            return
        first, last = span
        cursor = max(self._payload_cursor or first, first)
        for _ in range(MAX_BATCHES):
            if cursor > last:
                break
            dropped, newest = await self.store.drop_payloads(cursor, cursor + ID_SPAN, before)
            report.counts["payloads"] += dropped
            if newest is not None and newest >= before:
                break  # this span reaches into the window: start here next time
            cursor += ID_SPAN
        self._payload_cursor = cursor

    def _batched(
        self, kind: str, delete: Callable[[datetime, int], Awaitable[int]]
    ) -> Callable[[datetime, Report], Awaitable[None]]:
        async def step(now: datetime, report: Report) -> None:
            before = self.cutoffs(now)[kind]
            report.counts[kind] = 0
            if before is None:
                return
            for _ in range(MAX_BATCHES):
                n = await delete(before, BATCH)
                report.counts[kind] += n
                if n < BATCH:
                    break

        return step

    async def _closed_sessions(self, now: datetime, report: Report) -> None:
        before = self.cutoffs(now)["closed_sessions"]
        report.counts["closed_sessions"] = 0
        if before is None:
            return
        for session_id in await self.store.closed_sessions(before, SESSIONS_PER_RUN):
            exported = await self.store.export_session(session_id, before)
            if exported is None:
                continue  # reopened or changed meanwhile
            path = await asyncio.to_thread(
                _write_export,
                self.policy.export_dir,
                session_id,
                exported.session,
                exported.messages,
            )
            if await self.store.delete_session(session_id, before):
                report.counts["closed_sessions"] += 1
                report.exported.append(str(path))

    async def _audit(self, now: datetime, report: Report) -> None:
        dropped = await self.audit.once(now)
        report.partitions += dropped
        if dropped:
            self.metrics.partitions.labels("audit_events").inc(len(dropped))

    # --- the loop -----------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        """Every ``interval``, on the one replica holding the ``retention`` lock (every
        replica when no database address is known: a test's own store)."""
        if self._dsn is None:
            await self._every(stopping)
            return
        election = LeaderElection(self._dsn, interval=min(self.policy.interval, 5.0))
        await election.run("retention", lambda: self._every(stopping), stopping=stopping)

    async def _every(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.once()
            except Exception:  # one bad run must not end the loop
                log.exception("retention_run_failed")
                self.metrics.errors.labels("run").inc()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.policy.interval)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def _write_export(
    directory: Path, session_id: int, session: dict[str, Any], messages: list[dict[str, Any]]
) -> Path:
    """One JSON-lines file per session (the session, then its messages in order), flushed
    to disk before the session is deleted."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"session-{session_id}.jsonl"
    partial = path.with_suffix(".jsonl.partial")
    with partial.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"session": session}, default=str) + "\n")
        for message in messages:
            out.write(json.dumps({"message": message}, default=str) + "\n")
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)
    return path


def build_retention(
    settings: Settings, config: ConfigFile, db: Database, registry: CollectorRegistry
) -> Retention:
    """The gateway's retention loop: the policy of ``settings`` and the config file's
    ``[retention]`` (a bad entry raises ``ConfigError`` naming it), led on ``db``'s server."""
    return Retention(db, retention_policy(settings, config), registry=registry, dsn=db.dsn)
