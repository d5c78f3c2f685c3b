"""A stored summary of each document, written by the agent's model on the cold path.

A document that became ready is due its summary. A worker claims it across replicas (the
claim moves its due time a lease ahead and counts a try, so a worker that dies mid-summary
leaves it to a later claim), reads its passages in reading order and asks the model: one
call for a document that fits the summary prompt, else one call per part and a last one over
the parts' summaries. The first summary stored wins. Every model call is charged to the place
the file was shared in (its chat), or to ``kb:NAME`` for an operator's knowledge base.

A whole-document question whose document does not fit the prompt gets this summary and the
passages that best match it (``gateway.knowledge.whole``). Agents that cannot summarise a
document (``echo``, and an HTTP agent) write none; such a question then gets the document's
opening passages instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from gateway.agents.base import DocumentSummarizer, DocumentSummaryRequest
from gateway.agents.prompt import estimate_text
from gateway.core.errors import AgentError, StoreError
from gateway.core.hub import Signal
from session_store.repos.document_summaries import DocumentSummaries, DueSummary
from session_store.repos.knowledge import WholeDocuments

if TYPE_CHECKING:
    from gateway.core.settings import Settings
    from gateway.knowledge.service import Knowledge

log = structlog.get_logger(__name__)

#: document text in one request at most, whatever the model's window (the cost of a summary)
MAX_INPUT_TOKENS = 12_000

#: charges one model call: (place, model, (prompt, completion) tokens)
DocumentCharge = Callable[[str, str, tuple[int, int]], Awaitable[None]]

INSTRUCTIONS = (
    "You write the stored summary of a document in a knowledge base. An assistant will read "
    "your summary instead of the whole document when someone asks about all of it. Say what "
    "the document is, then its main points, with the names, numbers, dates and decisions "
    "that matter, in the document's order. Write plain text in the document's language, at "
    "most {words} words, with no preamble."
)
PART_INSTRUCTIONS = (
    "You summarise part {part} of {parts} of a document ({name}) for a later summary of the "
    "whole. Keep its main points with the names, numbers, dates and decisions that matter. "
    "Plain text, at most {words} words, no preamble."
)
FOLD_INSTRUCTIONS = (
    "These are the summaries of the parts of one document ({name}), in order. Write the "
    "stored summary of the whole document from them: what it is, then its main points, with "
    "the names, numbers, dates and decisions that matter. Plain text in the document's "
    "language, at most {words} words, no preamble."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SummarySettings:
    model: str
    #: tokens of document text in one request (the model's window less the answer, capped)
    input_tokens: int = 6000
    #: tokens of one summary
    output_tokens: int = 400
    #: parts of a long document summarised (its tail past them is left out, and said so)
    max_parts: int = 8
    lease_seconds: float = 300.0
    poll_seconds: float = 5.0
    #: delay before try n+1 is ``backoff_seconds * 4**(n-1)``
    backoff_seconds: float = 30.0


def place_of_document(kb_name: str, notify_target: Mapping[str, Any] | None) -> str:
    """Who pays for a document's summary: the chat a file was shared in, else the base."""
    if notify_target is not None:
        try:
            return (
                f"{notify_target['platform']}:{notify_target['scope']}:{notify_target['chat_id']}"
            )
        except KeyError:
            pass
    return f"kb:{kb_name}"


def parts_of(passages: Sequence[str], budget: int, max_parts: int) -> tuple[list[str], bool]:
    """The document's text in parts of at most ``budget`` tokens, cut between passages (a
    passage bigger than a part is its own part, cut to size); at most ``max_parts`` of them,
    and whether text was left out after the last."""
    parts: list[str] = []
    current: list[str] = []
    used = 0
    for text in passages:
        cost = estimate_text(text) + 2
        if current and used + cost > budget:
            parts.append("\n\n".join(current))
            current, used = [], 0
            if len(parts) == max_parts:
                return parts, True
        if cost > budget:
            text = text[: budget * 3]  # about three characters a token, at the least
            cost = budget
        current.append(text)
        used += cost
    if current:
        parts.append("\n\n".join(current))
    return parts, False


class SummaryFailed(Exception):
    """A summary that could not be written this time; ``str`` says why."""


class DocumentSummaryWorker:
    def __init__(
        self,
        summaries: DocumentSummaries,
        passages: WholeDocuments,
        agent: DocumentSummarizer,
        settings: SummarySettings,
        *,
        charge: DocumentCharge | None = None,
        wake: Signal | None = None,
    ) -> None:
        self._summaries = summaries
        self._passages = passages
        self._agent = agent
        self.settings = settings
        self.charge = charge
        #: set when a document becomes ready (the ingest worker's signal)
        self.wake = wake or Signal()

    async def run(self, stopping: asyncio.Event, beat: Callable[[], None] = lambda: None) -> None:
        """Claim and write summaries until ``stopping``; one document's failure is its own,
        and a database outage is waited out."""
        while not stopping.is_set():
            beat()
            try:
                busy = await self.process_one()
            except StoreError as exc:
                log.warning("kb_summary_store_error", error=str(exc))
                busy = False
            except Exception:
                log.exception("kb_summary_crashed")
                busy = False
            if not busy:
                await self.wake.wait(self.settings.poll_seconds)

    async def process_one(self) -> bool:
        """Write one due summary; ``False`` when none was due."""
        due = await self._summaries.claim(lease_seconds=self.settings.lease_seconds)
        if due is None:
            return False
        try:
            text, model = await self.write(due)
        except (AgentError, SummaryFailed) as exc:
            delay = self.settings.backoff_seconds * 4 ** (due.tries - 1)
            await self._summaries.fail(due.id, str(exc), retry_in=delay)
            log.warning("kb_summary_failed", document_id=due.id, tries=due.tries, error=str(exc))
            return True
        stored = await self._summaries.save(due.id, text, model)
        log.info("kb_summary_written", document_id=due.id, chars=len(text), stored=stored)
        return True

    async def write(self, due: DueSummary) -> tuple[str, str]:
        """The summary of ``due`` and the model that wrote it."""
        s = self.settings
        rows = await self._passages.passages([due.id])
        texts = [_passage_text(r) for r in rows]
        if not texts:
            raise SummaryFailed("the document has no text")
        parts, cut = parts_of(texts, s.input_tokens, s.max_parts)
        words = max(60, int(s.output_tokens * 0.6))
        place = place_of_document(due.kb_name, due.notify_target)
        if len(parts) == 1:
            return await self._call(
                due, place, INSTRUCTIONS.format(words=words), parts[0], part=1, parts=1
            )
        summaries: list[str] = []
        for n, text in enumerate(parts, start=1):
            instructions = PART_INSTRUCTIONS.format(
                part=n, parts=len(parts), name=due.name, words=words // 2
            )
            summary, _ = await self._call(
                due, place, instructions, text, part=n, parts=len(parts) + 1
            )
            summaries.append(f"Part {n}:\n{summary}")
        if cut:
            summaries.append("(The rest of the document was too long to summarise.)")
        return await self._call(
            due,
            place,
            FOLD_INSTRUCTIONS.format(name=due.name, words=words),
            "\n\n".join(summaries),
            part=len(parts) + 1,
            parts=len(parts) + 1,
        )

    async def _call(
        self, due: DueSummary, place: str, instructions: str, text: str, *, part: int, parts: int
    ) -> tuple[str, str]:
        s = self.settings
        result = await self._agent.summarize_document(
            DocumentSummaryRequest(
                document=due.name,
                model=s.model,
                instructions=instructions,
                text=text,
                max_output_tokens=s.output_tokens,
                part=part,
                parts=parts,
            )
        )
        if result is None or not result.text.strip():
            raise SummaryFailed("the model wrote no summary")
        model = result.model or s.model
        if self.charge is not None:
            # the call happened whether or not its summary is stored: charged either way
            used = (result.prompt_tokens or 0, result.completion_tokens or 0)
            await self.charge(place, model, used)
        return result.text.strip(), model


def _passage_text(row: Mapping[str, Any]) -> str:
    section = row.get("section")
    content = str(row["content"])
    return f"{section}\n{content}" if section else content


def build_summary_worker(
    settings: Settings,
    knowledge: Knowledge,
    agent: object,
    window: int,
    *,
    charge: DocumentCharge | None,
) -> DocumentSummaryWorker | None:
    """The summary worker with ``GATEWAY_KB_SUMMARIES`` and an agent that can summarise a
    document; ``None`` otherwise. ``window``: the tokens of AGENT_MODEL's context."""
    if not settings.gateway_kb_summaries or not isinstance(agent, DocumentSummarizer):
        return None
    output = max(200, settings.agent_summary_tokens)
    return DocumentSummaryWorker(
        knowledge.store.summaries,
        knowledge.store.whole,
        agent,
        SummarySettings(
            model=settings.agent_model,
            input_tokens=max(1000, min(window - output - 1000, MAX_INPUT_TOKENS)),
            output_tokens=output,
        ),
        charge=charge,
        wake=knowledge.summary_wake,
    )
