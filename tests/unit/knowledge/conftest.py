"""The knowledge-base fixtures (testsupport/knowledge.py): one embedder, a store, a service."""

from testsupport.knowledge import _embedder_loaded, knowledge, kstore  # noqa: F401
