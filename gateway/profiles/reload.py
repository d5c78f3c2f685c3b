"""One reload for every replica, through the database.

``gateway reload`` and ``POST /api/v1/reload`` write a request naming every live replica
(``session_store.repos.reloads``); each replica's ``ReloadAnswers`` loop finds it within
``POLL_SECONDS``, reads its config file again and reports the outcome: the file it read and
the SHA-256 of the bytes in force, or why it kept its previous profiles. The requester waits
for every replica asked (one that dies meanwhile is reported gone) and shows each report.

A reload tells the truth: a replica started without ``GATEWAY_CONFIG_FILE`` reports failed
(there is no file to read), and so does one whose file is not the one the requester means
(``gateway reload`` passes its own ``GATEWAY_CONFIG_FILE``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from gateway import audit
from gateway.core.config_watch import ReloadResult
from gateway.core.errors import StoreError
from session_store.repos.reloads import ReloadReport, Reloads

__all__ = ["POLL_SECONDS", "ReloadAnswers", "ReloadOutcome", "request_reload"]

log = structlog.get_logger(__name__)

#: how often a replica looks for reload requests (the longest a reload waits for one)
POLL_SECONDS = 1.0
#: how long a requester waits for every replica's report
WAIT_SECONDS = 20.0


def same_file(expected: str, path: Path) -> bool:
    """Whether ``expected`` (as the requester wrote it) names the file at ``path``."""
    try:
        return Path(expected).resolve() == path.resolve()
    except OSError:
        return Path(expected) == path


class ReloadAnswers:
    """A replica's side: answers the reload requests made of it, once each."""

    def __init__(
        self,
        reloads: Reloads,
        *,
        process_id: Callable[[], int | None],
        reload: Callable[[], ReloadResult],
        path: Path | None,
    ) -> None:
        self._reloads = reloads
        self._process_id = process_id
        self._reload = reload
        self._path = path
        self._host = socket.gethostname()
        self._pruned = 0.0

    def answer(self, expected: str | None) -> ReloadResult:
        """Reload, unless the requester means another file than this replica's."""
        if self._path is not None and expected is not None and not same_file(expected, self._path):
            return ReloadResult(
                ok=False,
                error=f"this gateway was started with GATEWAY_CONFIG_FILE={self._path}, "
                f"not {expected}: nothing reloaded (restart it with the file you mean)",
                path=str(self._path),
            )
        return self._reload()

    async def once(self) -> int:
        """Answer what is pending; how many were answered."""
        process_id = self._process_id()
        if process_id is None:
            return 0
        pending = await self._reloads.pending(process_id)
        for reload_id, expected in pending:
            result = self.answer(expected)
            await self._reloads.report(
                reload_id,
                process_id=process_id,
                host=self._host,
                pid=os.getpid(),
                ok=result.ok,
                path=result.path,
                sha256=result.sha256,
                error=result.error,
            )
            log.info(
                "config_reload_answered",
                reload_id=reload_id,
                ok=result.ok,
                path=result.path,
                sha256=result.sha256,
            )
        if time.monotonic() - self._pruned > 3600:
            self._pruned = time.monotonic()
            await self._reloads.prune()
        return len(pending)

    async def run(self, stopping: asyncio.Event, beat: Callable[[], None]) -> None:
        while not stopping.is_set():
            beat()
            try:
                await self.once()
            except StoreError as exc:  # the database is away: the next look tries again
                log.warning("config_reload_poll_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), POLL_SECONDS)


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    reload_id: int
    reports: list[ReloadReport]

    @property
    def ok(self) -> bool:
        """Every replica asked reloaded (and there was one)."""
        return bool(self.reports) and all(r.outcome == "reloaded" for r in self.reports)

    def failures(self) -> list[str]:
        return [f"replica {r.process_id}: {describe(r)}" for r in self.reports if not _good(r)]

    def to_json(self) -> dict[str, object]:
        return {
            "reloaded": self.ok,
            "reload_id": self.reload_id,
            "error": "; ".join(self.failures()) or (None if self.reports else NO_REPLICA),
            "replicas": [
                {
                    "process_id": r.process_id,
                    "host": r.host,
                    "pid": r.pid,
                    "status": status(r),
                    "path": r.path,
                    "sha256": r.sha256,
                    "error": r.error,
                }
                for r in self.reports
            ],
        }


NO_REPLICA = "no gateway is running on this database"


def _good(report: ReloadReport) -> bool:
    return report.outcome == "reloaded"


def status(report: ReloadReport) -> str:
    """``reloaded``, ``failed``, ``gone`` (it died before answering) or ``no answer``."""
    if report.outcome is not None:
        return report.outcome
    return "no answer" if report.alive else "gone"


def describe(report: ReloadReport) -> str:
    if report.outcome == "reloaded":
        return f"reloaded {report.path} sha256={report.sha256}"
    if report.outcome == "failed":
        return f"failed: {report.error}"
    if report.alive:
        return f"no answer within {WAIT_SECONDS:.0f} s"
    return "stopped before it answered"


async def request_reload(
    reloads: Reloads, *, path: str | None, wait: float = WAIT_SECONDS
) -> ReloadOutcome:
    """Ask every live replica to reload and wait for each one's report (or its end), at
    most ``wait`` seconds. Recorded in the audit log as who is acting (``config.reload``)."""
    actor = audit.current().actor
    reload_id, replicas = await reloads.request(actor=actor, path=path)
    deadline = time.monotonic() + wait
    reports = await reloads.reports(reload_id)
    while replicas and time.monotonic() < deadline:
        if all(r.outcome is not None or not r.alive for r in reports):
            break
        await asyncio.sleep(0.1)
        reports = await reloads.reports(reload_id)
    outcome = ReloadOutcome(reload_id, reports)
    await audit.record(
        reloads.db,
        "config.reload",
        ("config", path or ""),
        outcome="ok" if outcome.ok else "failed",
        reason="; ".join(outcome.failures()) or (None if replicas else NO_REPLICA),
        details={
            "replicas": {str(r.process_id): r.sha256 for r in reports if r.outcome == "reloaded"}
        },
    )
    return outcome
