"""The audit log's cold path: month partitions made ahead of time, old months dropped.

One step of the retention loop (``gateway.retention``: on one replica, not required for
readiness); the store also takes an advisory lock, so a ``gateway retention run`` beside it
waits its turn. A month is dropped only once all of it is older than
``GATEWAY_AUDIT_RETENTION_DAYS`` (0: never)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import structlog

from session_store.db import Database
from session_store.repos.audit import AuditStore

log = structlog.get_logger(__name__)

#: months of partitions kept ready after the current one
AHEAD_MONTHS = 2


class AuditMaintenance:
    def __init__(self, db: Database, *, retention_days: int) -> None:
        self._audit = AuditStore(db)
        self.retention_days = retention_days

    async def once(self, now: datetime | None = None) -> list[str]:
        """Make the partitions ahead; drop the expired months (their names)."""
        made = await self._audit.ensure_partitions(AHEAD_MONTHS)
        if made:
            log.info("audit_partitions_created", count=made)
        if self.retention_days <= 0:
            return []
        cutoff = (now or datetime.now(UTC)) - timedelta(days=self.retention_days)
        dropped = await self._audit.drop_before(cutoff)
        if dropped:
            log.info("audit_partitions_dropped", partitions=dropped, before=cutoff.isoformat())
        return dropped

    async def expired(self, cutoff: datetime) -> list[str]:
        """The month partitions ``once`` would drop at ``cutoff``."""
        return await self._audit.expired_before(cutoff)
