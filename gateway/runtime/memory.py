"""What a long run needs to see of the process itself: asyncio tasks and the Python heap as
gauges (``gateway_asyncio_tasks``, ``gateway_python_heap_bytes``: traced bytes while
``tracemalloc`` traces, e.g. under ``PYTHONTRACEMALLOC=1``), and, when
``GATEWAY_TRACEMALLOC_DUMP`` names a directory, a heap snapshot written there on SIGUSR2 (the
soak benchmark compares two for the top growth)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import tracemalloc
from pathlib import Path

import structlog

from gateway.core.metrics import Metrics

log = structlog.get_logger(__name__)

DUMP_ENV = "GATEWAY_TRACEMALLOC_DUMP"


def refresh(metrics: Metrics) -> None:
    metrics.asyncio_tasks.set(len(asyncio.all_tasks()))
    if tracemalloc.is_tracing():
        metrics.python_heap_bytes.set(tracemalloc.get_traced_memory()[0])


def install_dump_signal() -> None:
    """SIGUSR2 writes ``<dir>/heap-<pid>-<ms>.snap`` while tracemalloc traces (no-op
    otherwise, and where signals cannot be handled)."""
    where = os.environ.get(DUMP_ENV)
    if not where or not hasattr(signal, "SIGUSR2"):
        return
    directory = Path(where)

    def dump() -> None:
        if not tracemalloc.is_tracing():
            return
        path = directory / f"heap-{os.getpid()}-{int(time.time() * 1000)}.snap"
        tracemalloc.take_snapshot().dump(str(path))
        log.info("heap_snapshot_written", path=str(path))

    with contextlib.suppress(NotImplementedError, RuntimeError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, dump)
