"""The turn's knowledge, a part of ``Knowledge`` (``gateway.knowledge.service``): for one turn,
the files shared with its messages (straight to the model, or into the thread's knowledge
base with a bounded wait), then the passages for its question within the prompt's token
budget (whole documents for a question about whole documents), and after the answer, which
passages were cited (counted off the hot path)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import structlog

from gateway.agents.prompt import estimate_text
from gateway.core.attachments import FileSource
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import StoreError
from gateway.files.transcribe import is_audio
from gateway.knowledge.catalog import Catalog
from gateway.knowledge.citations import PROMPT_HEADER, TurnKnowledge, _loc, _trace_hit, source_label
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import EmbeddingError
from gateway.knowledge.inline import shared_files
from gateway.knowledge.retrieval import Retrieval
from gateway.knowledge.shared import FileIntake
from gateway.knowledge.whole import SUMMARY_HEADER, Chosen, as_hit, choose, whole_documents
from session_store.records import MessageRecord
from session_store.repos.knowledge import KnowledgeStore, PassageHit

log = structlog.get_logger(__name__)


class TurnKnowledgeBuilder:
    """What a turn reads; owns the counts of cited passages not yet written."""

    def __init__(
        self,
        store: KnowledgeStore,
        settings: KnowledgeSettings,
        *,
        catalog: Catalog,
        intake: FileIntake,
        retrieval: Retrieval,
    ) -> None:
        self._store = store
        self._settings = settings
        self._catalog = catalog
        self._intake = intake
        self._retrieval = retrieval
        self._doc_access: Counter[int] = Counter()
        self._chunk_access: Counter[int] = Counter()

    async def prepare(
        self,
        key: SessionKey,
        target: ReplyTarget,
        question: MessageRecord,
        pending: Sequence[MessageRecord],
        *,
        transport: object,
        token_budget: int,
        wait_seconds: float,
        bases: Sequence[str] = (),
    ) -> TurnKnowledge | None:
        """The turn scheduler's one call: files shared with these messages go into the
        thread's knowledge base (a bounded wait for them to be read), then passages for the
        question within ``token_budget``. A failure here never fails the turn: it is answered
        without them."""
        try:
            notes: list[str] = []
            parts: list[dict[str, Any]] = []
            # audio is heard (transcribed), not read as a document
            shared = [a for a in shared_files(pending) if not is_audio(a)]
            # a runtime protocol check is slow: only when files were shared
            source = transport if shared and isinstance(transport, FileSource) else None
            if shared and self._settings.inline_files:
                parts, notes, shared = await self._intake.inline_files(shared, source)
            if shared:
                notes += await self._intake.take_attachments(
                    key, target, shared, source, wait_seconds=wait_seconds
                )
            found = await self.for_turn(
                key, question.content, token_budget=token_budget, notes=notes, bases=bases
            )
            if not parts:
                return found
            if found is None:
                return TurnKnowledge(passages=(), prompt="", trace={}, parts=tuple(parts))
            return replace(found, parts=tuple(parts))
        except (StoreError, EmbeddingError) as exc:
            log.warning("kb_retrieval_failed", error=str(exc))
            return None

    async def for_turn(
        self,
        key: SessionKey,
        question: str,
        *,
        token_budget: int,
        notes: Sequence[str] = (),
        bases: Sequence[str] = (),
    ) -> TurnKnowledge | None:
        """Passages for a question asked in ``key``, within ``token_budget`` tokens; ``None``
        when nothing relevant is found (or nothing fits) and there is nothing to tell.
        ``bases``: knowledge bases the place's profile searches besides ``Catalog.scope(key)``."""
        if not question.strip():
            return (
                TurnKnowledge(passages=(), prompt="", trace={}, notes=tuple(notes))
                if notes
                else None
            )
        found_bases = await self._catalog.known(lambda: self._catalog.scope(key, extra=bases))
        if not found_bases and not notes:
            return None  # nothing to search and nothing to tell (no estimates)
        result = await self._retrieval.search_bases(
            question, found_bases, max(self._settings.passages * 2, 10), started=time.perf_counter()
        )
        s = self._settings
        relevant = [
            h
            for h in result.hits
            if h.lexical_rank is not None or (h.vector_score or 0.0) >= s.min_vector_score
        ]
        # a question about whole documents may use all that is left of the prompt
        whole = await self._whole(question, relevant, token_budget)
        if whole is not None:
            chosen, lines = list(whole.passages), [whole.header, *whole.summary_lines()]
            lines += [_block(n, h) for n, h in enumerate(chosen, start=1)]
            used = sum(estimate_text(line) + 2 for line in lines)
        else:
            chosen, lines, used = self._best(relevant, min(token_budget, s.max_prompt_tokens))
        trace = {
            "query": question,
            "mode": result.mode,
            "scopes": [b.name for b in found_bases],
            "candidates": [_trace_hit(h) for h in result.hits],
            "chosen": [h.chunk_id for h in chosen],
            "prompt_tokens": used if chosen else 0,
            "timings_ms": dict(result.timings_ms),
        }
        if whole is not None:
            trace["whole"] = {
                "mode": whole.mode,
                "documents": list(dict.fromkeys(h.document_id for h in chosen)),
                "summaries": [name for name, _ in whole.summaries],
            }
        if not chosen and (whole is None or not whole.summaries):
            if notes:
                return TurnKnowledge(passages=(), prompt="", trace=trace, notes=tuple(notes))
            return None
        # counted when cited (``count_access`` after the answer), not when offered
        return TurnKnowledge(
            passages=tuple(chosen), prompt="\n\n".join(lines), trace=trace, notes=tuple(notes)
        )

    def _best(
        self, relevant: Sequence[PassageHit], budget: int
    ) -> tuple[list[PassageHit], list[str], int]:
        """The best passages that fit ``budget``, at most ``passages`` of them, numbered."""
        chosen: list[PassageHit] = []
        lines = [PROMPT_HEADER]
        used = estimate_text(PROMPT_HEADER)
        for hit in relevant:
            if len(chosen) >= self._settings.passages:
                break
            block = _block(len(chosen) + 1, hit)
            cost = estimate_text(block) + 2
            if used + cost > budget:
                continue
            chosen.append(hit)
            lines.append(block)
            used += cost
        return chosen, lines, used

    async def _whole(
        self, question: str, relevant: Sequence[PassageHit], token_budget: int
    ) -> Chosen | None:
        """Whole documents for a question about whole documents (``gateway.knowledge.whole``);
        ``None`` for an ordinary question."""
        docs = whole_documents(question, relevant)
        if not docs:
            return None
        everything = [as_hit(r) for r in await self._store.whole.passages(docs)]
        cost = {h.chunk_id: estimate_text(_block(999, h)) + 2 for h in everything}
        room = token_budget - estimate_text(SUMMARY_HEADER) - 2
        fits = sum(cost.values()) <= room
        summaries = {} if fits else await self._store.summaries.of(docs)
        return choose(
            everything,
            relevant,
            budget=room,
            cost=cost,
            summaries=summaries,
            summary_cost=lambda text: estimate_text(text) + 12,
        )

    # --- access counters (off the hot path) ------------------------------------------------

    def count_access(self, hits: Sequence[PassageHit]) -> None:
        for hit in hits:
            self._doc_access[hit.document_id] += 1
            self._chunk_access[hit.chunk_id] += 1

    async def flush_access(self) -> None:
        if not self._doc_access and not self._chunk_access:
            return
        docs, chunks = dict(self._doc_access), dict(self._chunk_access)
        self._doc_access.clear()
        self._chunk_access.clear()
        try:
            await self._store.count_access(docs, chunks)
        except StoreError:
            self._doc_access.update(docs)
            self._chunk_access.update(chunks)
            raise


def _block(n: int, hit: PassageHit) -> str:
    """A passage as the prompt numbers it: ``[n] name, p. 3 — Section`` and its text."""
    label = source_label({"document_name": hit.document_name, **_loc(hit)})
    return f"[{n}] {label}\n{hit.content}"
