"""How the knowledge base runs: job leases and retries, retrieval sizes, and the callback
that tells a thread about its files."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.core.settings import Settings


class FileRejected(Exception):
    """A file that is too big or of a type the knowledge base cannot read; ``str`` says why."""


#: tells a thread (by its session key) something about a file shared there
Announce = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeSettings:
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    #: delay before try n+1 is ``backoff_seconds * 4**(n-1)``
    backoff_seconds: float = 5.0
    max_attempts: int = 3
    max_file_bytes: int = 20 * 1024 * 1024
    #: candidates per ranking before fusion, and passages offered to the model
    candidates: int = 40
    passages: int = 5
    #: most tokens of passages in one prompt (less when the budget is tighter)
    max_prompt_tokens: int = 2000
    #: how often access counts are written (off the hot path)
    flush_seconds: float = 2.0
    #: a passage only the embeddings found goes into a prompt only this similar (cosine):
    #: vector search always returns its nearest rows, relevant or not
    min_vector_score: float = 0.3
    #: ``default`` is searched in every chat (``GATEWAY_KB_DEFAULT=everywhere``), or only in
    #: chats it is assigned to
    default_everywhere: bool = True
    #: shared files that go straight to the model as content parts: ``images``, ``text``
    inline_files: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings) -> KnowledgeSettings:
        return cls(
            poll_seconds=max(settings.gateway_poll_seconds, 0.05),
            lease_seconds=max(settings.gateway_lease_seconds * 4, 10.0),
            max_file_bytes=settings.gateway_max_file_bytes,
            default_everywhere=settings.gateway_kb_default == "everywhere",
            inline_files=frozenset(settings.agent_inline_files),
        )
