"""A session's minutes, written into a knowledge base on the cold path.

A session that closes (``/new``, the admin API, MCP, ``gateway sessions close``) is due its
minutes once: the closing statement itself queues it (``session_minutes``, migration 0043),
so no close path can forget and none pays a transaction for it. ``MinutesWorker`` claims the
due sessions in batches across replicas. Where the place's profile names a knowledge base
(``minutes_kb``) it writes the minutes there as a Markdown document: the closing summary, the
decisions, the open checkpoints and the links, with the session's page, so an answer that
cites the minutes leads back to the session. Elsewhere the session is marked skipped.

The closing summary is written by the agent's model when it can summarise (``Summarizer``:
``openai``, ``http``), with the place's cheapest model, and that call is charged to the place
in the usage ledger; otherwise it is extractive (the session's newest rolling summary and
excerpts of what came after, marked as such). One session's failure is its own (retried with
backoff, then ``failed`` with its error); a database outage is waited out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from gateway.agents.base import Agent, ContextMessage, Summarizer, SummaryRequest
from gateway.agents.prompt import estimate_text
from gateway.core.commands import decision_text
from gateway.core.domain import SessionKey
from gateway.core.errors import AgentError, StoreError
from gateway.core.hub import Signal
from gateway.core.metrics import Metrics
from gateway.knowledge.config import FileRejected
from gateway.knowledge.files import FileStorageError
from gateway.knowledge.service import Knowledge
from gateway.turns.context import prompt_order, to_context
from gateway.turns.summaries import SummaryCharge, extractive_summary
from session_store.records import Checkpoint, Link, MessageRecord, SessionRecord
from session_store.repos.minutes import DueMinutes, Minutes
from session_store.repos.operator import OperatorStore
from session_store.store import Store

log = structlog.get_logger(__name__)

INSTRUCTIONS = (
    "You write the minutes of a chat conversation that has just ended, for a knowledge base "
    "people will search later. Say what the conversation was about, what was found out, "
    "what was decided and by whom, and what is still open, with the names, numbers and dates "
    "that matter. Plain text in the conversation's language, at most {words} words, no "
    "preamble."
)


#: while no profile keeps minutes: how often closed sessions are marked skipped, how many at once
OFF_POLL_SECONDS = 30.0
OFF_BATCH = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class MinutesSettings:
    #: sessions claimed at once
    batch: int = 20
    lease_seconds: float = 300.0
    poll_seconds: float = 5.0
    #: delay before try n+1 is ``backoff_seconds * 4**(n-1)``
    backoff_seconds: float = 30.0
    max_tries: int = 4
    #: tokens of the closing summary, and of the transcript it is written from
    summary_tokens: int = 512
    input_tokens: int = 6000
    #: where the operator pages are served (``GATEWAY_PUBLIC_URL``; "" for a relative link)
    public_url: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClosingSummary:
    text: str
    #: the model that wrote it; ``None``: extractive
    model: str | None


class MinutesWorker:
    """Claims sessions due their minutes and writes them; holds no state of its own."""

    def __init__(
        self,
        store: Store,
        minutes: Minutes,
        knowledge: Knowledge,
        agent: Agent,
        *,
        kb_of: Callable[[SessionKey], str | None],
        model_of: Callable[[SessionKey], str],
        enabled: Callable[[], bool] = lambda: True,
        settings: MinutesSettings | None = None,
        charge: SummaryCharge | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._ops = OperatorStore(store)
        self.minutes = minutes
        self._knowledge = knowledge
        self._agent = agent
        #: the knowledge base the place's profile writes minutes to (``None``: none)
        self._kb_of = kb_of
        #: the model a place's closing summary is written with (its cheapest)
        self._model_of = model_of
        #: whether any profile keeps minutes now (the config file may be reloaded)
        self._enabled = enabled
        self.settings = settings or MinutesSettings()
        self.charge = charge
        self._metrics = metrics
        self.wake = Signal()

    async def run(self, stopping: asyncio.Event, beat: Callable[[], None] = lambda: None) -> None:
        """Claim and write minutes until ``stopping``; a database outage is waited out. It
        looks a poll after it starts (never in the middle of start-up's first messages), and
        seldom while no profile keeps minutes (then it only marks closed sessions skipped,
        many at a time)."""
        busy = 0
        while not stopping.is_set():
            beat()
            if not busy:
                idle = self.settings.poll_seconds
                await self.wake.wait(idle if self._enabled() else max(idle, OFF_POLL_SECONDS))
                if stopping.is_set():
                    return
            try:
                busy = await self.process_batch()
            except StoreError as exc:
                log.warning("minutes_store_error", error=str(exc))
                busy = 0
            except Exception:
                log.exception("minutes_crashed")
                busy = 0

    async def process_batch(self) -> int:
        """One batch of due sessions; returns how many were claimed."""
        s = self.settings
        batch = s.batch if self._enabled() else OFF_BATCH
        due = await self.minutes.claim(limit=batch, lease_seconds=s.lease_seconds)
        skipped = [d.session_id for d in due if self._kb_of(d.key) is None]
        await self.minutes.skip(skipped)
        self._count("skipped", len(skipped))
        for item in due:
            if item.session_id not in skipped:
                await self._one(item)
        return len(due)

    async def _one(self, due: DueMinutes) -> None:
        kb = self._kb_of(due.key)
        assert kb is not None
        try:
            document_id = await self.write(due.session_id, kb)
        except (AgentError, StoreError, FileRejected, FileStorageError) as exc:
            await self._failed(due, f"{type(exc).__name__}: {exc}")
            return
        except Exception as exc:  # one bad session never stops the others
            log.exception("minutes_item_crashed", session_id=due.session_id)
            await self._failed(due, f"{type(exc).__name__}: {exc}")
            return
        await self.minutes.written(due.session_id, kb=kb, document_id=document_id)
        self._count("written")
        log.info("minutes_written", session_id=due.session_id, kb=kb, document_id=document_id)

    async def _failed(self, due: DueMinutes, error: str) -> None:
        delay = self.settings.backoff_seconds * 4 ** (due.tries - 1)
        state = await self.minutes.failed(
            due.session_id, error, retry_in=delay, max_tries=self.settings.max_tries
        )
        self._count("failed" if state == "failed" else "retried")
        log.warning("minutes_failed", session_id=due.session_id, tries=due.tries, error=error)

    def _count(self, outcome: str, n: int = 1) -> None:
        if self._metrics is not None and n:
            self._metrics.minutes.labels(outcome).inc(n)

    async def write(self, session_id: int, kb: str) -> int:
        """Write ``session_id``'s minutes into ``kb``; returns the document's id."""
        session = await self._store.sessions.get_session(session_id)
        decisions, checkpoints = await self._store.sessions.decisions(session_id)
        links = (await self._ops.session_detail(session_id)).links
        closing = await self.closing_summary(session)
        text = minutes_document(
            session,
            closing,
            decisions,
            checkpoints,
            links,
            page=f"{self.settings.public_url}/ops/sessions/{session.id}",
        )
        added = await self._knowledge.add(
            f"minutes-session-{session.id}.md", text.encode(), kb=kb, media_type="text/markdown"
        )
        return added.document.id

    async def closing_summary(self, session: SessionRecord) -> ClosingSummary:
        """The model's summary of the session (charged to its place), or an extractive one."""
        s = self.settings
        previous = await self._store.summaries.latest_summary(session.id)
        after = previous.to_seq if previous is not None else 0
        chunk = await self._newest(session.id, after=after, upto=session.last_seq_no)
        prev_text = previous.content if previous is not None else None
        if isinstance(self._agent, Summarizer) and (chunk or prev_text):
            model = self._model_of(session.key)
            result = await self._agent.summarize(
                SummaryRequest(
                    session_id=session.id,
                    key=session.key,
                    model=model,
                    instructions=INSTRUCTIONS.format(words=max(60, int(s.summary_tokens * 0.6))),
                    transcript=_transcript(prev_text, chunk),
                    previous=prev_text,
                    messages=chunk,
                    max_output_tokens=s.summary_tokens,
                )
            )
            if result is not None and result.text.strip():
                written_by = result.model or model
                if self.charge is not None:
                    used = (result.prompt_tokens or 0, result.completion_tokens or 0)
                    await self.charge(session.id, written_by, used)
                return ClosingSummary(text=result.text.strip(), model=written_by)
        return ClosingSummary(
            text=extractive_summary(prev_text, chunk, s.summary_tokens, estimate_text),
            model=None,
        )

    async def _newest(self, session_id: int, *, after: int, upto: int) -> list[ContextMessage]:
        """The newest conversation after ``after`` that fits the input budget, oldest first."""
        rows = await self._store.turns.context_page(
            session_id, after_seq=after, upto_seq=upto, limit=400
        )
        kept: list[ContextMessage] = []
        total = 0
        for m in (to_context(r) for r in rows):  # newest first
            cost = estimate_text(m.content) + 8
            if total + cost > self.settings.input_tokens:
                break
            kept.append(m)
            total += cost
        order = {m.seq_no: m for m in kept}
        return [order[r.seq_no] for r in prompt_order([r for r in rows if r.seq_no in order])]


def _transcript(previous: str | None, chunk: Sequence[ContextMessage]) -> str:
    head = f"Earlier summary:\n{previous}\n\n" if previous else ""
    lines = [
        f"[{m.seq_no}] {(m.sender_name or m.role) if m.role == 'user' else m.role}: {m.content}"
        for m in chunk
    ]
    return head + "The conversation:\n" + "\n".join(lines)


def minutes_document(
    session: SessionRecord,
    closing: ClosingSummary,
    decisions: Sequence[MessageRecord],
    checkpoints: Sequence[Checkpoint],
    links: Sequence[Link],
    *,
    page: str,
) -> str:
    """The minutes as Markdown: what the knowledge base stores and answers cite."""
    key = session.key
    place = ":".join([key.platform, key.scope, key.chat_id, *filter(None, [key.thread_id])])
    title = session.topic or session.title or f"session {session.id}"
    head = [
        f"# Minutes of session {session.id}: {title}",
        "",
        f"- Session: {page}",
        f"- Place: {place}",
        f"- Opened: {session.created_at:%Y-%m-%d %H:%M} UTC",
    ]
    if session.closed_at is not None:
        head.append(f"- Closed: {session.closed_at:%Y-%m-%d %H:%M} UTC")
    if session.tags:
        head.append(f"- Tags: {', '.join(session.tags)}")
    written = f"written by {closing.model}" if closing.model else "extractive: no model wrote it"
    body = [
        "",
        f"## Summary ({written})",
        "",
        closing.text.strip() or "(nothing was said)",
        "",
        "## Decisions",
        "",
        *([_decision(m) for m in decisions] or ["None recorded."]),
        "",
        "## Open checkpoints",
        "",
        *([_checkpoint(c) for c in checkpoints] or ["None open."]),
        "",
        "## Links",
        "",
        *([_link(x) for x in links] or ["None."]),
        "",
    ]
    return "\n".join(head + body)


def _decision(m: MessageRecord) -> str:
    who = m.sender_name or m.sender_id or m.role
    return f"- [#{m.seq_no}] {who}: {' '.join(decision_text(m.content).split())}"


def _checkpoint(c: Checkpoint) -> str:
    detail = f": {c.detail}" if c.detail else ""
    return f"- {c.name} ({c.status}){detail}"


def _link(x: Link) -> str:
    other = f"session {x.linked_session_id}" if x.linked_session_id else ""
    what = x.target_ref or x.url or other
    return f"- {x.relation}: {x.link_type or 'link'} {what}".rstrip()
