"""Citations: passages numbered for the prompt, and what an answer that cites them stores
and shows (frozen with the answer)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gateway.core.domain import Reply
from gateway.core.text import counted
from gateway.knowledge.numbering import PassageNumbers
from session_store.repos.knowledge import (
    DocumentRecord,
    PassageHit,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnKnowledge:
    """Passages chosen for one turn: the prompt section that numbers them, and the trace."""

    passages: tuple[PassageHit, ...]
    prompt: str
    trace: Mapping[str, Any]
    #: what became of files shared with the question (ready, failed, too big...)
    notes: tuple[str, ...] = ()
    #: files shared with the question that go straight to the model (OpenAI content parts:
    #: ``image_url`` with a data URL, ``text``), with ``AGENT_INLINE_FILES``
    parts: tuple[Mapping[str, Any], ...] = ()

    def numbered(self) -> PassageNumbers:
        """A numbering of the answer that starts with these passages, as the prompt numbers
        them (``[1]`` is the first)."""
        numbers = PassageNumbers()
        numbers.number_all(self.passages)
        return numbers

    def cite(self, replies: Sequence[Reply], numbers: PassageNumbers | None = None) -> list[Reply]:
        """``cite_answer`` with this turn's trace and notes; ``numbers`` is the answer's one
        numbering (these passages, then those the model's own searches were given)."""
        return cite_answer(
            replies,
            self.numbered() if numbers is None else numbers,
            trace=self.trace,
            notes=self.notes,
        )[0]


def cite_answer(
    replies: Sequence[Reply],
    numbers: PassageNumbers,
    *,
    trace: Mapping[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> tuple[list[Reply], list[PassageHit]]:
    """Attach the trace to the answer, and to each reply that cites ``[n]`` its frozen
    citations (metadata ``citations``, written to ``answer_citations`` with the message)
    and footnotes naming the document and page. ``[n]`` resolves to the passage given under
    ``n``; a number never given is left out of the sources. Also returns the passages
    cited (each once), for the access counter."""
    out: list[Reply] = []
    used: dict[int, PassageHit] = {}
    for index, reply in enumerate(replies):
        metadata: dict[str, Any] = dict(reply.metadata)
        if index == 0 and trace:
            metadata["retrieval_trace"] = dict(trace)
        cited = numbers.cited(reply.text)
        text = reply.text
        if index == 0 and notes:
            text = "\n".join(notes) + "\n\n" + text
        if cited:
            citations = [_citation(n, hit) for n, hit in cited]
            used.update((hit.chunk_id, hit) for _, hit in cited)
            metadata["citations"] = citations
            text = (
                text.rstrip()
                + "\n\nSources:\n"
                + "\n".join(f"[{c['ordinal']}] {source_label(c)}" for c in citations)
            )
        out.append(replace(reply, text=text, metadata=metadata))
    return out, list(used.values())


def document_note(doc: DocumentRecord) -> str:
    if doc.state == "ready":
        pages = f"{counted(doc.pages, 'page')}, " if doc.pages else ""
        passages = counted(doc.chunk_count, "passage")
        return f"📄 {doc.name} is ready ({pages}{passages}): ask me about it."
    return f"⚠️ I could not read {doc.name}: {doc.error}"


def source_label(citation: Mapping[str, Any]) -> str:
    """``name, p. 3 — Section > Sub`` (page and section where known)."""
    parts = [str(citation["document_name"])]
    if citation.get("page") is not None:
        parts.append(f"p. {citation['page']}")
    label = ", ".join(parts)
    if citation.get("section"):
        label += f" — {citation['section']}"
    return label


def _citation(ordinal: int, hit: PassageHit) -> dict[str, Any]:
    return {
        "ordinal": ordinal,
        "document_id": hit.document_id,
        "chunk_id": hit.chunk_id,
        "document_name": hit.document_name,
        "page": hit.page,
        "section": hit.section,
        "passage": hit.content,
        "score": hit.score,
    }


PROMPT_HEADER = (
    "Passages from the knowledge base that may answer the question. Use them when they are "
    "relevant and cite each one you use by its number in square brackets, like [1]. Do not "
    "invent sources."
)


def _loc(hit: PassageHit) -> dict[str, Any]:
    return {"page": hit.page, "section": hit.section}


def _trace_hit(hit: PassageHit) -> dict[str, Any]:
    return {
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "document": hit.document_name,
        "page": hit.page,
        "score": round(hit.score, 6),
        "lexical_rank": hit.lexical_rank,
        "lexical_score": None if hit.lexical_score is None else round(hit.lexical_score, 6),
        "vector_rank": hit.vector_rank,
        "vector_score": None if hit.vector_score is None else round(hit.vector_score, 6),
    }
