"""The Matrix tests' homeserver: one real Synapse per test process (testsupport.matrix)."""

from __future__ import annotations

import pytest

from testsupport.matrix import Synapse, synapse


@pytest.fixture(scope="session")
def homeserver() -> Synapse:
    return synapse()
