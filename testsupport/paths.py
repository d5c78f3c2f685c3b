"""Where things are in the checkout, for tests that read its files (so a test's own depth in
``tests/`` never matters)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: the repository root
REPO = Path(__file__).resolve().parents[1]
#: real platform payloads (copies of shared/payloads; SOURCES.md says where each comes from)
PAYLOADS = REPO / "testsupport" / "payloads"

#: memory-backed scratch space (tmpfs), where the system has it
_MEMORY = Path("/dev/shm")


def scratch_dir(prefix: str) -> Path:
    """A new directory for the suite's throwaway servers' data (its PostgreSQL servers', the
    Synapse homeserver's): in memory (``/dev/shm``) where the system has one we may write, else
    the usual temporary directory. Nothing there has to outlive its process, so nothing needs
    a disk: on the CI machine's ext4 (mounted with ``discard``) every file a server creates,
    syncs or deletes costs the kernel time, and a test's ``CREATE DATABASE ... TEMPLATE`` took
    0.3 s of CPU and 0.3-0.7 s there, against 0.02 s and 0.05 s in memory. The caller removes
    the directory."""
    parent = _MEMORY if _MEMORY.is_dir() and os.access(_MEMORY, os.W_OK | os.X_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
