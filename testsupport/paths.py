"""Where things are in the checkout, for tests that read its files (so a test's own depth in
``tests/`` never matters)."""

from __future__ import annotations

from pathlib import Path

#: the repository root
REPO = Path(__file__).resolve().parents[1]
#: real platform payloads (copies of shared/payloads; SOURCES.md says where each comes from)
PAYLOADS = REPO / "testsupport" / "payloads"
