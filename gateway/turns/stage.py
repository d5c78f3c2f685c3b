"""What a stage of a turn is, and the turn it works on.

A turn runs an ordered list of stages around one agent call (``gateway.turns.pipeline``). Each
stage declares what it does before the call (answer by itself, refuse, or add to the request),
what it holds open while the agent runs, and what it does with the answer (record, cite,
charge). A stage object serves every turn of every worker at once: what it keeps for one turn
goes on that turn (``TurnRun.put`` / ``get``), never on the stage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

from gateway.agents.base import (
    ContextMessage,
    ContextSummary,
    ProviderProgress,
    StreamSink,
    Toolbox,
    Turn,
)
from gateway.core.domain import Reply, ReplyTarget
from gateway.core.errors import StoreError
from gateway.core.profile import Profile
from gateway.turns.context import ContextPolicy
from session_store.records import MessageRecord, TurnClaim
from session_store.repos.usage import UsageCharge

T = TypeVar("T")

#: the model recorded for answers the gateway gives itself (commands, apologies)
COMMAND_MODEL = "command"
APOLOGY = "Sorry, I could not answer that just now. Please try again."


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A stage ends the turn before the agent is asked: these replies, this outcome."""

    outcome: str
    replies: Sequence[Reply] = ()
    #: the turn handles messages up to this one only, and answers in its thread (later
    #: messages get their own run)
    upto: MessageRecord | None = None
    #: the session is closed with this answer (``/new``)
    close_session: bool = False


class Slot(Generic[T]):
    """Where one stage keeps its value for one turn (``TurnRun.put`` / ``get``)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


@dataclass(eq=False, kw_only=True)
class AgentRequest:
    """What the agent will be asked, as the stages build it (``build`` makes the ``Turn``)."""

    new_messages: list[ContextMessage] = field(default_factory=list)
    context: list[ContextMessage] = field(default_factory=list)
    model: str | None = None
    selected_model: str | None = None
    system_prompt: str = ""
    #: sections appended to the system prompt (knowledge passages, ...), in stage order
    sections: list[str] = field(default_factory=list)
    summary: ContextSummary | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    #: tokens the whole prompt may use, and the estimate of what it uses so far
    prompt_budget: int | None = None
    estimated_prompt_tokens: int | None = None
    session_metadata: Mapping[str, Any] = field(default_factory=dict)
    tools: Sequence[Mapping[str, Any]] = ()
    toolbox: Toolbox | None = None
    attachments: Sequence[Mapping[str, Any]] = ()
    stream: StreamSink | None = None
    progress: ProviderProgress | None = None
    #: the request sized for another model (set by the context stage; see ``Turn.refit``)
    refit: Callable[[Turn, str], Turn] | None = None
    #: raw tokens the prompt carries besides the transcript (tool schemas): the context
    #: stage leaves room for them
    reserved_tokens: int = 0
    #: an opaque, stable id of the person asking, for the model provider
    user: str | None = None
    #: the model calls the agent made so far, appended as each returns (a stopped run is
    #: charged for them)
    spent: list[dict[str, Any]] = field(default_factory=list)

    def room(self) -> int:
        """Tokens left in the prompt budget (0 until a stage sized the prompt)."""
        if self.prompt_budget is None:
            return 0
        return self.prompt_budget - (self.estimated_prompt_tokens or 0)

    def build(self, turn: TurnRun) -> Turn:
        return Turn(
            session_id=turn.claim.session_id,
            key=turn.claim.key,
            target=turn.target,
            context=self.context,
            new_messages=self.new_messages,
            selected_model=self.selected_model,
            model=self.model,
            system_prompt="\n\n".join([self.system_prompt, *(s for s in self.sections if s)]),
            summary=self.summary,
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            estimated_prompt_tokens=self.estimated_prompt_tokens,
            session_metadata=self.session_metadata,
            tools=self.tools,
            toolbox=self.toolbox,
            attachments=self.attachments,
            stream=self.stream,
            user=self.user,
            progress=self.progress,
            refit=self.refit,
            spent=self.spent,
        )


@dataclass(eq=False, kw_only=True)
class TurnRun:
    """One run of a claimed turn, as the stages see it."""

    claim: TurnClaim
    #: the unanswered messages this run handles, in seq order
    pending: Sequence[MessageRecord]
    #: the newest seq this run handles (its answer is placed after it)
    handled_seq: int
    #: the messages that ask for an answer, in seq order
    asks: list[MessageRecord]
    #: the asks still open for the agent; a stage that answers one (a command) takes it out
    questions: list[MessageRecord] = field(default_factory=list)
    #: answers given before the agent's (commands), in order
    replies: list[Reply] = field(default_factory=list)
    #: the outcome when no question is left for the agent
    outcome: str = "nothing_to_answer"
    request: AgentRequest = field(default_factory=AgentRequest)
    close_session: bool = False
    #: the answer was streamed: the outbox edits these previews into it
    previews_after: int | None = None
    #: an answer that ended the run at an earlier message answers in that message's thread
    answered_in: ReplyTarget | None = None
    #: the place's profile, resolved once for the turn (``gateway.profiles.stage``), and its
    #: model and prompt rules (``None``: the settings')
    profile: Profile | None = None
    policy: ContextPolicy | None = None
    #: the model calls to write to the usage ledger with the answer (the usage stage)
    charges: list[UsageCharge] = field(default_factory=list)
    #: the run was stopped (``/stop``, a stop reaction): its answer is what was written so far
    stopped: bool = False
    #: why the run starts over (``new`` messages, its question's ``edit`` or ``delete``)
    restarted_by: str | None = None
    #: the streamed previews go (the question was deleted): the streaming stage removes them
    discard_previews: bool = False
    #: the answer text streamed so far (set by the streaming stage)
    streamed: Callable[[], str] | None = None
    #: messages edited (their text now) or deleted (``None``) while this turn ran: a run
    #: that starts over reads them so (``gateway.turns.scheduler``)
    revised: dict[int, str | None] = field(default_factory=dict)
    _slots: dict[Slot[Any], object] = field(default_factory=dict, init=False, repr=False)
    _holds: list[Callable[[], str | None]] = field(default_factory=list, init=False, repr=False)

    @property
    def rewrites(self) -> int | None:
        """The seq of the question whose answer this run writes again, for its edited
        text (``on_edit = "update"``), else ``None``."""
        for message in self.asks:
            seq = message.metadata.get("rewrites")
            if isinstance(seq, int) and not isinstance(seq, bool):
                return seq
        return None

    @property
    def question(self) -> MessageRecord | None:
        """The newest question for the agent."""
        return self.questions[-1] if self.questions else None

    @property
    def target(self) -> ReplyTarget:
        """Where the answer lands: the newest question's thread (or the newest ask's)."""
        if self.answered_in is not None:
            return self.answered_in
        return target_of(self.questions[-1] if self.questions else self.asks[-1])

    def put(self, slot: Slot[T], value: T) -> None:
        self._slots[slot] = value

    def get(self, slot: Slot[T]) -> T | None:
        return cast("T | None", self._slots.get(slot))

    def hold_when(self, check: Callable[[], str | None]) -> None:
        """After the agent call, ``check`` names the approval the turn waits for (if any):
        the turn parks instead of answering."""
        self._holds.append(check)

    def held_by(self) -> str | None:
        return next((held for held in (check() for check in self._holds) if held), None)

    def end_with(self, answer: Answer) -> str:
        """Take ``answer`` as the turn's end; its outcome."""
        if answer.upto is not None:
            self.handled_seq = answer.upto.seq_no
            self.answered_in = target_of(answer.upto)
        self.close_session = answer.close_session
        self.replies.extend(answer.replies)
        return answer.outcome


class Stage:
    """One step of every turn. Override what the stage does; the rest does nothing.

    ``before`` runs in list order before the agent call (the first ``Answer`` ends the turn:
    later stages and the agent are skipped). ``around`` is entered in list order just before
    the agent call and left after it. ``after`` runs in reverse list order on the agent's
    replies (not on an ``Answer`` nor an apology). ``close`` runs, in reverse order, for every
    stage whose ``before`` ran, however the run ended."""

    #: a short name, for logs and tests
    name: ClassVar[str] = "stage"

    async def before(self, turn: TurnRun) -> Answer | None:
        return None

    def around(self, turn: TurnRun) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def after(self, turn: TurnRun, replies: list[Reply]) -> list[Reply]:
        return replies

    async def close(self, turn: TurnRun) -> None:
        return None


def is_scheduled(message: MessageRecord) -> bool:
    """A schedule's question (``gateway.schedules``): a system message, never a person's."""
    return message.role == "system" and "schedule_id" in message.metadata


def one_firing_a_turn(pending: Sequence[MessageRecord]) -> tuple[list[MessageRecord], bool]:
    """What one turn handles of its pending messages: a schedule's firing (or an answer's
    rewrite) is a turn of its own (two firings due together get an answer each, and a
    person's question is not answered together with one), so the messages before the first
    firing, or that firing alone when it comes first. Also whether any were left for the next
    turn."""
    for i, message in enumerate(pending):
        # an answer written again for an edited question is a turn of its own too: it edits
        # the old answer in place, which a new question's answer must not do
        if is_scheduled(message) or "rewrites" in message.metadata:
            end = max(i, 1)
            return list(pending[:end]), end < len(pending)
    return list(pending), False


def asks_for_answer(message: MessageRecord) -> bool:
    """A person's message that asks for an answer, or a schedule's question."""
    if message.trigger != "answer":
        return False
    return message.role == "user" or is_scheduled(message)


def target_of(message: MessageRecord) -> ReplyTarget:
    if message.reply_target is None:
        raise StoreError(f"message {message.id} has no stored reply target")
    return message.reply_target


def as_context(m: MessageRecord) -> ContextMessage:
    return ContextMessage(
        seq_no=m.seq_no,
        role=m.role,
        content=m.content,
        sender_name=m.sender_name,
        sender_id=m.sender_id,
    )


#: what the thread is told when the model provider was the trouble (``ProviderFailure.cause``)
PROVIDER_APOLOGIES = {
    "rate_limited": "Sorry, the model is rate limited right now, so I could not answer.",
    "unavailable": "Sorry, the model is unavailable right now, so I could not answer.",
    "timed_out": "Sorry, the model took too long to answer.",
}
TRY_AGAIN = " Your next message will be tried again."


def apology(reason: str, *, model: str | None = None, cause: str | None = None) -> Reply:
    """The thread gets a plain message, naming the cause when the provider was the trouble
    (rate limited, unavailable, timed out); the reason (model or upstream error text) stays
    in the metadata, the logs and the operator pages."""
    metadata: dict[str, object] = {"error": reason, "failed_turn": True}
    if model is not None:
        metadata["agent_model"] = model
    text = APOLOGY
    if cause in PROVIDER_APOLOGIES:
        metadata["cause"] = cause
        text = PROVIDER_APOLOGIES[cause] + TRY_AGAIN
    return Reply(text=text, model=COMMAND_MODEL, metadata=metadata)
