"""Rolling summaries, on the cold path.

When a turn's context had to leave older turns out, the turn scheduler calls
``SummaryWorker.request`` (never awaited work: it only notes the session) and answers at once.
The worker's tracked tasks then fold everything older than the newest turns that fit half
the budget into a new ``session_summaries`` row covering ``from_seq..to_seq``: the previous
summary plus the messages after it, in chunks that fit the summarizing model. The next turn's
context is that summary (in the system prompt) plus the messages after ``to_seq``.

Agents that implement ``Summarizer`` (``openai``, ``http``) write the summary with their model
(``model_written``); for the others an extractive summary (excerpts) keeps history bounded.
Two replicas may summarize the same session: the insert only lands if it moves the session's
summary forward, so the result is the same.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog

from gateway.agents.base import Agent, ContextMessage, Summarizer, SummaryRequest
from gateway.core.domain import SessionKey
from gateway.core.errors import AgentError, StoreError
from gateway.core.lifecycle.supervisor import item_backoff
from gateway.core.metrics import Metrics
from gateway.turns.context import (
    ContextAssembler,
    fit_turns,
    prompt_order,
    to_context,
    truncate_message,
)
from session_store.records import SummaryRecord
from session_store.store import Store

#: what the usage ledger is told of a summary's model call
SummaryCharge = Callable[[int, str, tuple[int, int]], Awaitable[None]]

log = structlog.get_logger(__name__)

INSTRUCTIONS = (
    "You keep the running summary of a chat conversation for the assistant that takes part "
    "in it; the assistant will see your summary instead of these messages. Fold the new "
    "messages into the previous summary. Keep who said what that matters, names, facts, "
    "numbers, decisions, open questions and promises; drop greetings and small talk. Write "
    "plain text in the conversation's language, at most {words} words, with no preamble."
)

EXCERPTS_HEADER = "Excerpts of earlier messages (oldest left out when too many):"


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryJob:
    session_id: int
    model: str
    #: summarize only messages up to here (what the requesting turn had handled)
    upto_seq: int
    #: raw tokens of newest whole turns that stay verbatim (half the transcript budget)
    keep_raw: int
    requested_at: float = 0.0


class SummaryWorker:
    """Bounded queue of sessions due a summary, served by tracked, named tasks."""

    def __init__(
        self,
        store: Store,
        agent: Agent,
        assembler: ContextAssembler,
        *,
        metrics: Metrics | None = None,
        workers: int = 2,
        max_pending: int = 1000,
        max_chunks: int = 8,
    ) -> None:
        self._store = store
        self._agent = agent
        self._assembler = assembler
        self._metrics = metrics
        self._workers = workers
        self._max_pending = max_pending
        self._max_chunks = max_chunks
        self._pending: OrderedDict[int, SummaryJob] = OrderedDict()
        self._running: set[int] = set()
        self._wake = asyncio.Event()
        #: charges a summary's model call (session id, model, (prompt, completion) tokens)
        #: to the session's place in the usage ledger; set by the runtime
        self.charge: SummaryCharge | None = None

    # --- hot path side: note the session, never wait -------------------------------------

    def request(self, job: SummaryJob) -> None:
        if job.requested_at == 0.0:
            job = SummaryJob(
                session_id=job.session_id,
                model=job.model,
                upto_seq=job.upto_seq,
                keep_raw=job.keep_raw,
                requested_at=time.monotonic(),
            )
        queued = self._pending.pop(job.session_id, None)
        if queued is not None and queued.upto_seq > job.upto_seq:
            job = queued
        self._pending[job.session_id] = job
        while len(self._pending) > self._max_pending:
            # the dropped session asks again on its next evicting turn
            dropped, _ = self._pending.popitem(last=False)
            log.warning("summary_request_dropped", session_id=dropped)
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    # --- cold path -----------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as group:
            for n in range(self._workers):
                group.create_task(self._worker(stopping), name=f"summary-worker-{n}")

    def _next(self) -> SummaryJob | None:
        for session_id in self._pending:
            if session_id not in self._running:
                return self._pending.pop(session_id)
        return None

    @property
    def workers(self) -> int:
        return self._workers

    async def _worker(self, stopping: asyncio.Event) -> None:
        await self.work(stopping)

    async def work(self, stopping: asyncio.Event, beat: Callable[[], None] = lambda: None) -> None:
        """One summary worker; a job that fails in any way is logged and dropped (the
        session asks again on its next evicting turn)."""
        while not stopping.is_set():
            beat()
            job = self._next()
            if job is None:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                except TimeoutError:
                    pass
                continue
            self._running.add(job.session_id)
            try:
                await self.summarize(job)
            except (AgentError, StoreError) as exc:
                # the session asks again on its next evicting turn; nothing is lost meanwhile
                log.warning("summary_failed", session_id=job.session_id, error=str(exc))
            except Exception:
                log.exception("summary_crashed", session_id=job.session_id)
                await asyncio.sleep(item_backoff(1))
            finally:
                self._running.discard(job.session_id)
                self._wake.set()  # a job for this session may have waited for us

    async def summarize(self, job: SummaryJob) -> list[SummaryRecord]:
        """Write the summaries ``job`` calls for; returns them (none if nothing is due)."""
        assembler = self._assembler
        counter = assembler.counter
        policy = assembler.policy
        previous = await self._store.summaries.latest_summary(job.session_id)
        after = previous.to_seq if previous is not None else 0
        if after >= job.upto_seq:
            return []
        rows, exhausted = await assembler.fetch_newest(
            job.session_id, after_seq=after, upto_seq=job.upto_seq, raw_budget=job.keep_raw
        )
        ordered = [to_context(r) for r in prompt_order(rows)]
        fit = fit_turns(ordered, budget=job.keep_raw, cost=assembler.cost)
        if exhausted and fit.evicted_messages == 0 and fit.dropped_messages == 0:
            return []
        # everything before the oldest kept message: a whole-turn boundary
        cut = min(m.seq_no for m in fit.messages) - 1 if fit.messages else job.upto_seq
        written: list[SummaryRecord] = []
        summary_budget = policy.window(job.model) - policy.summary_tokens
        if policy.max_prompt_tokens is not None:
            summary_budget = min(summary_budget, policy.max_prompt_tokens)
        raw_budget = math.floor(summary_budget / counter.factor(job.model))
        for _ in range(self._max_chunks):
            if after >= cut:
                break
            prev_text = previous.content if previous is not None else None
            fixed = counter.text(INSTRUCTIONS) + counter.text(prev_text or "") + 64
            chunk, chunk_end = await self._chunk(
                job.session_id, after=after, upto=cut, raw_budget=raw_budget - fixed
            )
            if not chunk:
                break  # only commands left before the cut: nothing the context would show
            started = time.perf_counter()
            text, model, model_written, used = await self._write(job, prev_text, chunk)
            if used is not None and self.charge is not None:
                # the model call happened whether or not the summary lands: the place is
                # charged first, so a summary is never visible before its charge
                await self.charge(job.session_id, model or job.model, used)
            record = await self._store.summaries.add_summary(
                job.session_id,
                from_seq=previous.from_seq if previous is not None else 1,
                to_seq=chunk_end,
                content=text,
                model=model,
                model_written=model_written,
            )
            if record is None:
                break  # another replica got further; its summary is the newest
            written.append(record)
            latency = time.monotonic() - job.requested_at if job.requested_at else None
            if self._metrics is not None:
                self._metrics.summary_seconds.observe(time.perf_counter() - started)
            log.info(
                "summary_written",
                session_id=job.session_id,
                from_seq=record.from_seq,
                to_seq=record.to_seq,
                messages=len(chunk),
                model_written=model_written,
                write_ms=round((time.perf_counter() - started) * 1000, 1),
                since_request_ms=None if latency is None else round(latency * 1000, 1),
            )
            previous, after = record, record.to_seq
        return written

    async def _chunk(
        self, session_id: int, *, after: int, upto: int, raw_budget: int
    ) -> tuple[list[ContextMessage], int]:
        """The oldest messages of ``(after, upto]`` that fit ``raw_budget`` as transcript lines,
        and the seq the chunk reaches (``upto`` when it took everything)."""
        cost = self._assembler.counter.text
        chunk: list[ContextMessage] = []
        total = 0
        cursor = after
        while True:
            page = await self._store.turns.context_page(
                session_id, after_seq=cursor, upto_seq=upto, limit=200, newest_first=False
            )
            for r in page:
                m = to_context(r)
                line_cost = cost(_line(m)) + 2
                if total + line_cost > raw_budget:
                    if not chunk:  # one message bigger than the whole budget: its middle goes
                        m = truncate_message(
                            m, target=max(raw_budget, 1), cost=lambda x: cost(_line(x)) + 2
                        )
                        return [m], m.seq_no
                    return chunk, chunk[-1].seq_no
                chunk.append(m)
                total += line_cost
            if len(page) < 200:
                return chunk, upto
            cursor = page[-1].seq_no

    async def _write(
        self, job: SummaryJob, previous: str | None, chunk: Sequence[ContextMessage]
    ) -> tuple[str, str | None, bool, tuple[int, int] | None]:
        """The summary's text, model, whether a model wrote it, and the model call's
        (prompt, completion) tokens when one was made."""
        policy = self._assembler.policy
        counter = self._assembler.counter
        limit = policy.summary_tokens
        if isinstance(self._agent, Summarizer):
            instructions = INSTRUCTIONS.format(words=max(50, int(limit * 0.6)))
            transcript = _transcript(previous, chunk)
            result = await self._agent.summarize(
                SummaryRequest(
                    session_id=job.session_id,
                    key=await self._key(job.session_id),
                    model=job.model,
                    instructions=instructions,
                    transcript=transcript,
                    previous=previous,
                    messages=list(chunk),
                    max_output_tokens=limit,
                )
            )
            if result is not None and result.text.strip():
                if result.prompt_tokens:
                    raw = counter.prompt(
                        [
                            {"role": "system", "content": instructions},
                            {"role": "user", "content": transcript},
                        ]
                    )
                    counter.observe(job.model, raw=raw, actual=result.prompt_tokens)
                text = result.text.strip()
                # a server that ignored the output limit must not bloat every later prompt
                if counter.text(text) > 2 * limit:
                    text = _newest_within(text.splitlines(), 2 * limit, counter.text)
                used = (result.prompt_tokens or 0, result.completion_tokens or 0)
                return text, result.model or job.model, True, used
        return extractive_summary(previous, chunk, limit, counter.text), None, False, None

    async def _key(self, session_id: int) -> SessionKey:
        return (await self._store.sessions.get_session(session_id)).key


def _line(m: ContextMessage) -> str:
    who = (m.sender_name or m.role) if m.role == "user" else m.role
    return f"[{m.seq_no}] {who}: {m.content}"


def _transcript(previous: str | None, chunk: Sequence[ContextMessage]) -> str:
    head = f"Previous summary:\n{previous}\n\n" if previous else "Previous summary: (none)\n\n"
    return head + "New messages:\n" + "\n".join(_line(m) for m in chunk)


def _newest_within(lines: Sequence[str], limit: int, cost: Callable[[str], int]) -> str:
    kept: list[str] = []
    total = 0
    for line in reversed(lines):
        c = cost(line) + 1
        if total + c > limit:
            break
        kept.append(line)
        total += c
    return "\n".join(reversed(kept))


def extractive_summary(
    previous: str | None,
    chunk: Sequence[ContextMessage],
    limit: int,
    cost: Callable[[str], int],
) -> str:
    """Excerpts for agents that cannot summarize: the first line of each message, newest
    kept when they exceed ``limit`` raw tokens. Marked not model-written by the caller."""
    lines = previous.splitlines() if previous else []
    if lines and lines[0] == EXCERPTS_HEADER:
        lines = lines[1:]  # our own earlier excerpts: continue them
    for m in chunk:
        first = " ".join(m.content.split())
        if len(first) > 160:
            first = first[:157] + "..."
        who = (m.sender_name or m.role) if m.role == "user" else m.role
        lines.append(f"- [{m.seq_no}] {who}: {first}")
    return EXCERPTS_HEADER + "\n" + _newest_within(lines, limit, cost)
