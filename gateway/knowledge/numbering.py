"""One numbering of passages per answer.

The passages a turn is given before the agent runs and every passage a ``search_knowledge``
call returns during it are numbered in one sequence: ``[n]`` in the answer means the passage
given under ``n``, whichever way it reached the model. The same passage met twice keeps its
first number (so two numbers never name one passage and one number never names two). A number
that was never given resolves to nothing: it is dropped, never mapped to something else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from session_store.repos.knowledge import PassageHit

#: ``[n]`` markers in an answer (at most three digits: ``[2024]`` is a year, not a citation)
CITE_MARK = re.compile(r"\[(\d{1,3})\]")


class PassageNumbers:
    """The passages given for one answer, by number (1-based, in the order given)."""

    __slots__ = ("_by_chunk", "_hits")

    def __init__(self) -> None:
        self._hits: list[PassageHit] = []
        self._by_chunk: dict[int, int] = {}

    def number(self, hit: PassageHit) -> int:
        """The number ``hit`` is given as: its earlier number, or the next one."""
        known = self._by_chunk.get(hit.chunk_id)
        if known is not None:
            return known
        self._hits.append(hit)
        self._by_chunk[hit.chunk_id] = len(self._hits)
        return len(self._hits)

    def number_all(self, hits: Iterable[PassageHit]) -> list[int]:
        return [self.number(h) for h in hits]

    def passage(self, n: int) -> PassageHit | None:
        """The passage given under ``n``; ``None`` for a number never given."""
        return self._hits[n - 1] if 1 <= n <= len(self._hits) else None

    def cited(self, text: str) -> list[tuple[int, PassageHit]]:
        """The numbers ``text`` cites that were given, each once, in number order."""
        out: list[tuple[int, PassageHit]] = []
        for n in sorted({int(m) for m in CITE_MARK.findall(text)}):
            hit = self.passage(n)
            if hit is not None:
                out.append((n, hit))
        return out

    def __len__(self) -> int:
        return len(self._hits)

    def __bool__(self) -> bool:
        return bool(self._hits)
