"""Context assembly: what the agent sees of a session, bounded by the model's own budget.

The design ("memory"):

- **Per-model budget.** Each model has a context window (``WINDOWS`` below, overridden by
  ``AGENT_CONTEXT_WINDOWS``; unknown models get ``AGENT_DEFAULT_CONTEXT_WINDOW``). The prompt
  budget is window - reserved output - tool schemas (optionally capped by
  ``AGENT_MAX_PROMPT_TOKENS``); the system prompt (with the place and the summary) is paid
  out of it first, the transcript gets the rest.
- **Whole-turn eviction.** The transcript is cut into turns (the user messages and everything
  that answered them) and trimmed oldest turn first; a turn is never split, so a tool call
  never loses its result. Only when the newest turn alone is larger than the whole budget are
  its longest messages shortened in the middle (marked), and as a last resort its oldest
  unanswered user messages dropped; the transcript stays valid either way.
- **Token counting** and the per-model windows live with the prompt's rendering, in
  ``gateway.agents.prompt``.
- **Summaries.** Context = the newest summary (in the system prompt) + the messages after it.
  Writing summaries is ``gateway.turns.summaries``' job, on the cold path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from gateway.agents.base import ContextMessage, ContextSummary
from gateway.agents.prompt import (
    MESSAGE_OVERHEAD,
    PROMPT_OVERHEAD,
    TokenCounter,
    context_window,
    render_message,
    render_prompt,
)
from gateway.core.domain import PLACE_KEY, Place, ReplyTarget, SessionKey
from gateway.core.errors import ContextTooSmall
from gateway.core.settings import Settings
from session_store.records import ContextRecord, PrefetchedContext, SummaryRecord, TurnState
from session_store.store import Store


def resolve_model(
    *,
    session_choice: str | None,
    user_choice: str | None,
    allowed: Sequence[str],
    default: str,
) -> tuple[str, str]:
    """The model for a turn and where it came from: this session's ``/model`` choice, else
    this person's last choice, else the default. A choice that has left the allow-list falls
    through silently to the next layer."""
    if session_choice and session_choice in allowed:
        return session_choice, "session"
    if user_choice and user_choice in allowed:
        return user_choice, "user"
    return default, "default"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextPolicy:
    """Model choice and budget rules, from the settings."""

    default_model: str = "gpt-4o-mini"
    allowed_models: tuple[str, ...] = ()
    window_overrides: Mapping[str, int] = field(default_factory=dict)
    default_window: int = 8192
    max_output_tokens: int = 1024
    max_prompt_tokens: int | None = None
    summary_tokens: int = 512
    summaries: bool = True
    system_prompt: str = "You are a helpful assistant in a team chat."

    @classmethod
    def from_settings(cls, settings: Settings) -> ContextPolicy:
        return cls(
            default_model=settings.agent_model,
            allowed_models=tuple(settings.agent_models or [settings.agent_model]),
            window_overrides=settings.context_windows(),
            default_window=settings.agent_default_context_window,
            max_output_tokens=settings.agent_max_output_tokens,
            max_prompt_tokens=settings.agent_max_prompt_tokens,
            summary_tokens=settings.agent_summary_tokens,
            summaries=settings.agent_summaries,
            system_prompt=settings.agent_system_prompt,
        )

    @property
    def allowed(self) -> tuple[str, ...]:
        return self.allowed_models or (self.default_model,)

    def window(self, model: str) -> int:
        return context_window(model, overrides=self.window_overrides, default=self.default_window)

    def prompt_budget(self, model: str, *, tool_tokens: int = 0) -> int:
        """Tokens the whole prompt (system message included) may use for ``model``."""
        budget = self.window(model) - self.max_output_tokens - tool_tokens
        if self.max_prompt_tokens is not None:
            budget = min(budget, self.max_prompt_tokens)
        return budget

    def resolve(self, *, session_choice: str | None, user_choice: str | None) -> tuple[str, str]:
        return resolve_model(
            session_choice=session_choice,
            user_choice=user_choice,
            allowed=self.allowed,
            default=self.default_model,
        )


# --- turns and eviction (pure) ---------------------------------------------------------------

M = TypeVar("M", bound=ContextMessage)


def group_turns(messages: Sequence[M]) -> list[list[M]]:
    """Cut a transcript into turns: a run of user messages and everything after it up to the
    next user message (the answers, tool calls and their results)."""
    groups: list[list[M]] = []
    current: list[M] = []
    previous_role: str | None = None
    for m in messages:
        if m.role == "user" and current and previous_role != "user":
            groups.append(current)
            current = []
        current.append(m)
        previous_role = m.role
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    messages: list[ContextMessage]
    evicted_messages: int
    truncated_messages: int = 0
    dropped_messages: int = 0


#: content shorter than this is never shortened (a marker would cost as much as it saves)
MIN_TRUNCATE_CHARS = 240


def fit_turns(
    messages: Sequence[ContextMessage], *, budget: int, cost: Callable[[ContextMessage], int]
) -> Fit:
    """The newest whole turns whose total ``cost`` fits ``budget`` (a contiguous suffix: an
    older turn is never kept when a newer one was dropped). The newest turn is always kept;
    when it alone is too big it is shortened (see module docstring)."""
    groups = group_turns(messages)
    if not groups:
        return Fit(messages=[], evicted_messages=0)
    kept: list[list[ContextMessage]] = []
    total = 0
    for group in reversed(groups):
        group_cost = sum(cost(m) for m in group)
        if total + group_cost > budget:
            break
        kept.append(group)
        total += group_cost
    if kept:
        flat = [m for g in reversed(kept) for m in g]
        return Fit(messages=flat, evicted_messages=len(messages) - len(flat))
    newest = groups[-1]
    shrunk, truncated, dropped = _shrink(newest, budget=budget, cost=cost)
    return Fit(
        messages=shrunk,
        evicted_messages=len(messages) - len(newest),
        truncated_messages=truncated,
        dropped_messages=dropped,
    )


def _shrink(
    group: list[ContextMessage], *, budget: int, cost: Callable[[ContextMessage], int]
) -> tuple[list[ContextMessage], int, int]:
    items = list(group)
    costs = [cost(m) for m in items]
    truncated: set[int] = set()
    dropped = 0
    while sum(costs) > budget:
        excess = sum(costs) - budget
        candidates = [i for i, m in enumerate(items) if len(m.content) > MIN_TRUNCATE_CHARS]
        if candidates:
            i = max(candidates, key=lambda j: costs[j])
            target = max(costs[i] - excess, 1)
            shorter = truncate_message(items[i], target=target, cost=cost)
            new_cost = cost(shorter)
            if new_cost < costs[i]:
                items[i], costs[i] = shorter, new_cost
                truncated.add(id(items[i]))
                continue
        # last resort: drop the oldest user message that has no answer yet (never an answer,
        # a tool call or a result, so the transcript stays valid); keep the last question
        users = [i for i, m in enumerate(items) if m.role == "user"]
        if len(users) < 2:
            raise ContextTooSmall("the model's context window is too small for this message")
        i = users[0]
        del items[i]
        del costs[i]
        dropped += 1
    return items, len(truncated), dropped


def truncate_message(
    m: ContextMessage, *, target: int, cost: Callable[[ContextMessage], int]
) -> ContextMessage:
    """``m`` with the middle of its content cut out so that its cost is at most ``target``
    (or as small as a head and tail of ``MIN_TRUNCATE_CHARS // 2`` each allows)."""
    text = m.content
    n = len(text)

    def cut(keep: int) -> ContextMessage:
        omitted = n - 2 * keep
        marker = f"\n[... {omitted} characters omitted to fit the context window ...]\n"
        return replace(m, content=text[:keep] + marker + text[n - keep :])

    lo, hi = MIN_TRUNCATE_CHARS // 2, (n - 1) // 2
    if hi < lo:
        return m
    best = cut(lo)
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = cut(mid)
        if cost(candidate) <= target:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


def prompt_order(records: Sequence[ContextRecord]) -> list[ContextRecord]:
    """Transcript order: by seq, except that a reply sits right after the newest message its
    turn handled. Messages that arrived during a run get lower seq numbers than the run's
    reply, yet they were not part of what it answered."""

    def key(r: ContextRecord) -> tuple[int, int, int]:
        if r.role != "user" and r.answers_seq is not None and r.answers_seq < r.seq_no:
            return (r.answers_seq, 1, r.seq_no)
        return (r.seq_no, 0 if r.role == "user" else 1, r.seq_no)

    return sorted(records, key=key)


def to_context(r: ContextRecord) -> ContextMessage:
    return ContextMessage(
        seq_no=r.seq_no,
        role=r.role,
        content=r.content,
        sender_name=r.sender_name,
        sender_id=r.sender_id,
        tool_calls=r.tool_calls,
        tool_call_id=r.tool_call_id,
    )


# --- the system prompt: who, where, and what came before ----------------------------------

_PLACES = {
    "telegram": ("Telegram", "chat", "forum topic"),
    "slack": ("Slack", "channel", "thread"),
    "mattermost": ("Mattermost", "channel", "thread"),
    "web": ("the built-in web chat", "channel", "thread"),
}


def _clean(value: Any, limit: int = 100) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stored_place(metadata: Mapping[str, Any]) -> Place:
    """The ``Place`` stored with a message. A message stored before adapters filled it
    carries only its platform's own fields; they are read here, in this one place, so the
    system prompt of an older conversation stays what it was."""
    stored = metadata.get(PLACE_KEY)
    if isinstance(stored, Mapping):
        return Place.from_json(stored)
    # legacy rows: Telegram chat_type/chat_title, Slack channel_type "im", Mattermost "D"
    name = metadata.get("chat_title") or metadata.get("channel_display_name")
    name = name or metadata.get("channel_name")
    topic = metadata.get("topic_name")
    return Place(
        direct=metadata.get("chat_type") == "private"
        or metadata.get("channel_type") in ("im", "D"),
        chat_name=str(name) if name else None,
        thread_name=str(topic) if topic else None,
    )


def describe_place(
    key: SessionKey,
    target: ReplyTarget,
    *,
    place: Place,
    title: str | None = None,
) -> str:
    """One sentence saying where the conversation is, from the stored key and target (the
    same thread the reply goes to) and the place the adapter described with the message."""
    label, chat_noun, thread_noun = _PLACES.get(key.platform, (key.platform, "chat", "thread"))
    if place.direct:
        chat = "a direct conversation"
    elif place.chat_name:
        chat = f'{chat_noun} "{_clean(place.chat_name)}" (id {_clean(key.chat_id)})'
    else:
        chat = f"{chat_noun} {_clean(key.chat_id)}"
    if target.thread_id is not None:
        where = f"{thread_noun} {_clean(target.thread_id)}"
        if place.thread_name:
            where += f' ("{_clean(place.thread_name)}")'
        elif title:
            where += f' (started with "{_clean(title, 80)}")'
        reply_in = f"that same {thread_noun}"
    else:
        where = "no thread (the main conversation)"
        reply_in = "that same conversation"
    return (
        f"Where this conversation is: {label}, {chat}, {where}. Your reply is posted in "
        f"{reply_in}; you only see messages from it."
    )


def summary_section(summary: ContextSummary) -> str:
    who = "written by a model" if summary.model_written else "excerpts, not model-written"
    return (
        f"Summary of the earlier conversation (messages {summary.from_seq}-{summary.to_seq}, "
        f"{who}); the messages after it follow in full:\n{summary.content}"
    )


# --- assembly against the store ----------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Assembled:
    """A turn's context, sized for its model."""

    model: str
    model_source: str
    window: int
    max_output_tokens: int
    #: tokens the whole prompt may use (window - reserved output - tools, maybe capped)
    prompt_budget: int
    system_prompt: str
    summary: ContextSummary | None
    messages: list[ContextMessage]
    #: raw and calibrated estimates of the rendered prompt (``render_prompt``)
    raw_tokens: int
    estimated_tokens: int
    #: the transcript held more than fits: older turns were left out (a summary is due)
    evicted: bool
    evicted_messages: int
    truncated_messages: int
    session_metadata: Mapping[str, Any]
    #: the transcript part's raw budget (the summary worker keeps half of it verbatim)
    history_raw_budget: int


class ContextAssembler:
    """Builds each turn's context from the store: newest summary + the newest whole turns
    after it that fit the model's budget. Reads only as many rows as the budget can hold
    (pages, newest first), so its cost does not grow with the conversation."""

    def __init__(
        self,
        store: Store,
        policy: ContextPolicy,
        counter: TokenCounter,
        *,
        page_size: int = 512,
    ) -> None:
        self._store = store
        self.policy = policy
        self.counter = counter
        self._page_size = page_size

    def cost(self, m: ContextMessage) -> int:
        return self.counter.message(render_message(m))

    async def assemble(
        self,
        *,
        session_id: int,
        key: SessionKey,
        target: ReplyTarget,
        upto_seq: int,
        question_seq: int,
        user_id: str | None,
        tool_tokens: int = 0,
        prefetched: PrefetchedContext | None = None,
        policy: ContextPolicy | None = None,
        heard: Mapping[int, str | None] | None = None,
    ) -> Assembled:
        """``policy``: the place's profile's (default: the settings'). ``heard``: the text of
        messages by seq as the turn reads them now (a voice note's transcript may be stored
        after the claim read its message, empty, with the first context page; a question
        edited while its answer was written), ``None`` for one deleted meanwhile."""
        policy = policy or self.policy
        # read with the claim when it is for this very question and range
        if prefetched is not None and (prefetched.question_seq, prefetched.upto_seq) != (
            question_seq,
            upto_seq,
        ):
            prefetched = None
        if prefetched is not None:
            state = prefetched.state
        else:
            state = await self._turn_state(session_id, key, question_seq, upto_seq, user_id)
        model, source = policy.resolve(
            session_choice=state.selected_model, user_choice=state.user_model
        )
        window = policy.window(model)
        budget = policy.prompt_budget(model, tool_tokens=tool_tokens)
        factor = self.counter.factor(model)
        raw_budget = math.floor(budget / factor)

        summary, system_prompt = self._system_prompt(
            state, key, target, raw_budget, instructions=policy.system_prompt
        )
        system_raw = self.counter.message({"role": "system", "content": system_prompt})
        history_budget = raw_budget - system_raw - PROMPT_OVERHEAD
        if history_budget < 2 * MESSAGE_OVERHEAD + 16:
            raise ContextTooSmall(
                f"the context window of {model} ({window} tokens) is too small for the "
                "system prompt"
            )
        after = summary.to_seq if summary is not None else 0
        first = None
        if prefetched is not None and prefetched.after_seq == after:
            first = (prefetched.limit, list(prefetched.page))
        records, exhausted = await self.fetch_newest(
            session_id,
            after_seq=after,
            upto_seq=upto_seq,
            raw_budget=history_budget,
            first_page=first,
        )
        ordered = _as_heard([to_context(r) for r in prompt_order(records)], heard or {})
        fit = fit_turns(ordered, budget=history_budget, cost=self.cost)
        rendered = render_prompt(system_prompt, fit.messages)
        raw = self.counter.prompt(rendered)
        return Assembled(
            model=model,
            model_source=source,
            window=window,
            max_output_tokens=policy.max_output_tokens,
            prompt_budget=budget,
            system_prompt=system_prompt,
            summary=summary,
            messages=fit.messages,
            raw_tokens=raw,
            estimated_tokens=math.ceil(raw * factor),
            evicted=(not exhausted) or fit.evicted_messages > 0 or fit.dropped_messages > 0,
            evicted_messages=fit.evicted_messages + fit.dropped_messages,
            truncated_messages=fit.truncated_messages,
            session_metadata=state.session_metadata,
            history_raw_budget=history_budget,
        )

    async def _turn_state(
        self,
        session_id: int,
        key: SessionKey,
        question_seq: int,
        upto_seq: int,
        user_id: str | None,
    ) -> TurnState:
        return await self._store.turns.turn_state(
            session_id,
            question_seq=question_seq,
            upto_seq=upto_seq,
            user_platform=key.platform,
            user_id=user_id,
        )

    def _system_prompt(
        self,
        state: TurnState,
        key: SessionKey,
        target: ReplyTarget,
        raw_budget: int,
        *,
        instructions: str,
    ) -> tuple[ContextSummary | None, str]:
        """The system prompt: the instructions, the place, and the newest summary (cut so a
        summary written for a bigger model does not crowd out the transcript)."""
        summary = None
        if state.summary is not None:
            summary = _as_summary(state.summary)
            limit = max(raw_budget // 4, 64)
            if self.counter.text(summary.content) > limit:
                summary = replace(summary, content=_cut_to(summary.content, limit, self.counter))
        parts = [instructions.strip()]
        parts.append(
            describe_place(key, target, place=stored_place(state.place), title=state.title)
        )
        if summary is not None:
            parts.append(summary_section(summary))
        return summary, "\n\n".join(p for p in parts if p)

    async def fetch_newest(
        self,
        session_id: int,
        *,
        after_seq: int,
        upto_seq: int,
        raw_budget: int,
        first_page: tuple[int, list[ContextRecord]] | None = None,
    ) -> tuple[list[ContextRecord], bool]:
        """Newest context rows of ``(after_seq, upto_seq]`` until they exceed ``raw_budget``
        and include a turn boundary (so the newest turn is complete). Returns the rows and
        whether the range was read to its start."""
        rows: list[ContextRecord] = []
        total = 0
        seen_user = boundary = False
        cursor = upto_seq
        # small first pages for small windows, doubling for big ones
        limit = min(64, self._page_size)
        while True:
            if first_page is not None:
                # the first page came with the claim; ``len < limit`` still means the end
                limit, page = first_page
                first_page = None
            else:
                page = await self._store.turns.context_page(
                    session_id, after_seq=after_seq, upto_seq=cursor, limit=limit
                )
            for r in page:
                rows.append(r)
                total += self.cost(to_context(r))
                if r.role == "user":
                    seen_user = True
                elif seen_user:
                    boundary = True
            if len(page) < limit:
                return rows, True
            if total > raw_budget and boundary:
                return rows, False
            cursor = page[-1].seq_no - 1
            limit = min(limit * 2, self._page_size)


def _as_heard(
    ordered: list[ContextMessage], heard: Mapping[int, str | None]
) -> list[ContextMessage]:
    """The user messages with the text the turn heard (a transcript stored after the claim,
    a question edited while its answer was written); one deleted meanwhile (``None``) left out."""
    if not heard:
        return ordered
    out: list[ContextMessage] = []
    for m in ordered:
        if m.role != "user" or m.seq_no not in heard:
            out.append(m)
            continue
        text = heard[m.seq_no]
        if text is not None:
            out.append(replace(m, content=text))
    return out


def _as_summary(record: SummaryRecord) -> ContextSummary:
    return ContextSummary(
        content=record.content,
        from_seq=record.from_seq,
        to_seq=record.to_seq,
        model_written=record.model_written,
        model=record.model,
    )


def _cut_to(text: str, raw_tokens: int, counter: TokenCounter) -> str:
    """The start of ``text`` within ``raw_tokens`` (summaries put the oldest first)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if counter.text(text[:mid]) + 4 <= raw_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + " [...]"
