"""Whole documents for questions about whole documents.

"Summarise this", "give me an overview", "compare the two contracts": a handful of passages
cannot answer those. When the question asks for that, or the passages found are dominated by
one document, the turn gets the whole document (every passage, in reading order, numbered
like any passages so the answer still cites them) when it fits what is left of the prompt;
when it does not, the document's stored summary (``gateway.knowledge.summaries``, written
by the model when it was added) and the passages that best match the question, within the
budget; a document without a summary gives its opening passages (its own overview, in most
documents) instead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from session_store.repos.knowledge import PassageHit

_WHOLE = re.compile(
    r"\b(summar(y|ies|i[sz]e|i[sz]ing)|overview|tl;?dr|gist|outline|compare|comparison|"
    r"contrast|differences?\s+between|whole\s+(document|file|text)|entire\s+(document|file))\b",
    re.IGNORECASE,
)
_COMPARE = re.compile(
    r"\b(compare|comparison|contrast|differences?|versus|vs\.?|between)\b", re.IGNORECASE
)
#: documents given whole at most (a comparison), and the passages that decide "dominated"
MAX_DOCUMENTS = 3
TOP = 5
DOMINANT = 4
#: opening passages of each document given when the whole does not fit
LEAD = 2

WHOLE_HEADER = (
    "The whole document(s) the question is about, passage by passage in reading order. "
    "Use them and cite each passage you use by its number in square brackets, like [1]. "
    "Do not invent sources."
)
PARTIAL_HEADER = (
    "The document(s) the question is about do not fit whole: their opening passages and "
    "the passages that best match the question. Cite each passage you use by its number in "
    "square brackets, like [1]. Do not invent sources; say what you could not see."
)

SUMMARY_HEADER = (
    "The document(s) the question is about do not fit whole: a summary of each, written "
    "when it was added, and the passages that best match the question. Cite each passage "
    "you use by its number in square brackets, like [1]; a summary has no number, so do not "
    "cite it. Do not invent sources; say what you could not see."
)


def asks_whole(question: str) -> bool:
    return _WHOLE.search(question) is not None


def dominant_document(hits: Sequence[PassageHit]) -> int | None:
    """The document that holds at least ``DOMINANT`` of the ``TOP`` best passages."""
    top = hits[:TOP]
    if len(top) < DOMINANT:
        return None
    doc, count = Counter(h.document_id for h in top).most_common(1)[0]
    return doc if count >= DOMINANT else None


def whole_documents(question: str, hits: Sequence[PassageHit]) -> list[int]:
    """The documents to give whole for ``question`` (best first); none for an ordinary
    question."""
    if asks_whole(question):
        wanted = MAX_DOCUMENTS if _COMPARE.search(question) else 1
        order = list(dict.fromkeys(h.document_id for h in hits))
        return order[:wanted]
    doc = dominant_document(hits)
    return [] if doc is None else [doc]


@dataclass(frozen=True, slots=True)
class Chosen:
    passages: tuple[PassageHit, ...]
    #: ``whole``: every passage; ``partial``: summaries (or openings) and best matches
    mode: str
    header: str
    #: (document name, stored summary) of the documents given by their summary
    summaries: tuple[tuple[str, str], ...] = ()

    def summary_lines(self) -> list[str]:
        return [f"Summary of {name}:\n{text}" for name, text in self.summaries]


def choose(
    everything: Sequence[PassageHit],
    best: Sequence[PassageHit],
    *,
    budget: int,
    cost: dict[int, int],
    summaries: Mapping[int, str] | None = None,
    summary_cost: Callable[[str], int] = len,
) -> Chosen | None:
    """Every passage when they fit ``budget`` (``cost``: tokens of each passage's prompt
    block, by chunk id); else each document's stored summary (``summaries`` by document id,
    ``summary_cost`` its tokens) or, without one, its openings, then the best matches, in
    reading order."""
    if not everything:
        return None
    if sum(cost[h.chunk_id] for h in everything) <= budget:
        return Chosen(tuple(everything), "whole", WHOLE_HEADER)
    docs = list(dict.fromkeys(h.document_id for h in everything))
    names = {h.document_id: h.document_name for h in everything}
    given: list[tuple[str, str]] = []
    used = 0
    wanted: list[PassageHit] = []
    for doc in docs:
        summary = (summaries or {}).get(doc)
        if summary is not None and used + summary_cost(summary) <= budget:
            given.append((names[doc], summary))
            used += summary_cost(summary)
            continue
        wanted += [h for h in everything if h.document_id == doc][:LEAD]
    known = {h.chunk_id for h in everything}
    wanted += [h for h in best if h.chunk_id in known]
    picked: dict[int, PassageHit] = {}
    for hit in wanted:
        if hit.chunk_id in picked or used + cost[hit.chunk_id] > budget:
            continue
        picked[hit.chunk_id] = hit
        used += cost[hit.chunk_id]
    if not picked and not given:
        return None
    in_order = tuple(h for h in everything if h.chunk_id in picked)
    header = SUMMARY_HEADER if given else PARTIAL_HEADER
    return Chosen(in_order, "partial", header, tuple(given))


def as_hit(row: Mapping[str, Any]) -> PassageHit:
    """A passage of a whole document as the prompt and the citations take passages."""
    return PassageHit(
        chunk_id=row["chunk_id"],
        document_id=row["document_id"],
        document_name=row["document_name"],
        kb_name=row["kb_name"],
        ordinal=row["ordinal"],
        page=row["page"],
        section=row["section"],
        content=row["content"],
        score=0.0,
        lexical_rank=None,
        lexical_score=None,
        vector_rank=None,
        vector_score=None,
    )
