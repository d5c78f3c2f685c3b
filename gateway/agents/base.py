"""The agent port and the built-in agents. ``AGENT`` picks one: ``echo`` (default),
``openai`` and ``http`` (``gateway.agents.openai``, ``gateway.agents.http``), or
``module:callable`` for an agent in Python (``gateway.agents.loading``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gateway.core.domain import Reply, ReplyTarget, SessionKey

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextMessage:
    seq_no: int
    role: str
    content: str
    sender_name: str | None = None
    sender_id: str | None = None
    #: chat-format tool calls of an assistant message / the call a tool result answers
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextSummary:
    """A rolling summary standing in for the messages ``from_seq..to_seq``."""

    content: str
    from_seq: int
    to_seq: int
    model_written: bool = True
    model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One call the model asked for, in the chat format's terms (``arguments`` is the raw
    JSON text the model wrote; it may be malformed, and that is the tool's result then)."""

    id: str
    name: str
    arguments: str

    def to_chat(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    call_id: str
    name: str
    content: str
    #: ok | error | refused | timeout | not_approved
    outcome: str = "ok"


@runtime_checkable
class Toolbox(Protocol):
    """The tools of one turn: only the offered ones run, each under its policy,
    timeout and output cap; errors come back as results, never as exceptions. Every call
    and result is recorded and stored with the turn."""

    max_steps: int

    async def run(self, calls: Sequence[ToolCall], *, content: str = "") -> list[ToolResult]:
        """Run one step's calls (in parallel); ``content`` is the assistant text that came
        with them."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """What an agent sees: this session's own context only, oldest first, and which of those
    messages are new since the last answer. ``target`` says where the answer will land."""

    session_id: int
    key: SessionKey
    target: ReplyTarget
    context: Sequence[ContextMessage]
    new_messages: Sequence[ContextMessage]
    selected_model: str | None = None
    #: the model for this turn (session's choice -> this person's last choice -> default)
    model: str | None = None
    #: the whole system message: base prompt, where the conversation is, and the summary
    #: (``context`` holds only the messages after the summary)
    system_prompt: str = ""
    summary: ContextSummary | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    #: our estimate of the rendered prompt (system message + context) in the model's tokens
    estimated_prompt_tokens: int | None = None
    session_metadata: Mapping[str, Any] = field(default_factory=dict)
    #: the tool schemas offered this turn (OpenAI ``tools`` format) and where to run calls;
    #: empty / ``None`` when no tool is offered
    tools: Sequence[Mapping[str, Any]] = ()
    toolbox: Toolbox | None = None
    #: files shared with the question that go straight to the model (``AGENT_INLINE_FILES``):
    #: OpenAI content parts (``image_url``, ``text``) added to the newest user message
    attachments: Sequence[Mapping[str, Any]] = ()
    #: where a streaming agent writes the answer while it grows; ``None``: the
    #: scheduler does not want a stream for this turn (answer in one piece)
    stream: StreamSink | None = None
    #: an opaque, stable id of the person asking (a hash, never a name): OpenAI's ``user``
    user: str | None = None
    #: where the agent says it waits on the provider (the turn shows it after a while)
    progress: ProviderProgress | None = None
    #: ``refit(turn, model)``: the turn sized for another model's window (a fallback), by
    #: the context stage's rules on the context already read; ``None``: use it as it is
    refit: Callable[[Turn, str], Turn] | None = None
    #: where the agent appends each model call's record (``usage.call_record``) as it
    #: returns, so a turn stopped halfway is charged for the calls made; ``None``: not kept
    spent: list[dict[str, Any]] | None = None


class ProviderProgress(Protocol):
    """What a network agent tells the turn while the provider keeps it waiting (the status
    line and the typing indicator: ``gateway.turns.stages.provider``). Never raises."""

    def asking(self, model: str) -> None:
        """A request to ``model`` is on its way (nothing has come back yet)."""
        ...

    def waiting(self, cause: str, seconds: float) -> None:
        """The last request failed (``rate_limited``, ``unavailable``, ``timed_out``); the
        next one goes in ``seconds``."""
        ...

    def answering(self) -> None:
        """The answer has started to arrive."""
        ...


class StreamSink(Protocol):
    """Where a ``Streaming`` agent reports progress. Never raises; never blocks for long
    (previews are best effort: the returned ``Reply`` is what gets delivered)."""

    def text(self, delta: str) -> None:
        """More answer text (appended)."""
        ...

    def restart(self) -> None:
        """The text so far is void (a tool step follows, a retry): start over."""
        ...

    def status(self, line: str) -> None:
        """A short status while tools run ("searching the knowledge base…")."""
        ...


@runtime_checkable
class Streaming(Protocol):
    """Optional: an agent that can write its answer into ``Turn.stream`` as it is produced.
    ``streams`` False (or an agent without it) answers in one piece; no preview is made."""

    streams: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryRequest:
    """Ask an agent to fold ``messages`` into ``previous`` (the newest summary, if any).
    ``instructions`` and ``transcript`` are the prompt, already rendered and sized."""

    session_id: int
    key: SessionKey
    model: str
    instructions: str
    transcript: str
    previous: str | None
    messages: Sequence[ContextMessage]
    max_output_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryResult:
    text: str
    model: str | None = None
    #: the server's count of the summary prompt, for calibrating estimates
    prompt_tokens: int | None = None
    #: the server's count of the summary itself (the usage ledger charges it to the place)
    completion_tokens: int | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Optional: an agent that can write rolling summaries with its model. Agents without it
    get extractive summaries (excerpts, marked as not model-written)."""

    async def summarize(self, request: SummaryRequest) -> SummaryResult | None:
        """The new summary text, or ``None`` if this agent does not summarize after all."""
        ...


@runtime_checkable
class QuickAsker(Protocol):
    """Optional: an agent that answers one short side query with a model, without retries
    (tool routing asks which tool families a message needs)."""

    async def ask_once(
        self, model: str, instructions: str, text: str, *, max_output_tokens: int, timeout: float
    ) -> SummaryResult: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class DocumentSummaryRequest:
    """Ask an agent to summarise a document, or one part of a long one (``part`` of
    ``parts``; then a last request folds the parts' summaries). ``instructions`` and ``text``
    are the prompt, already rendered and sized."""

    document: str
    model: str
    instructions: str
    text: str
    max_output_tokens: int
    part: int = 1
    parts: int = 1


@runtime_checkable
class DocumentSummarizer(Protocol):
    """Optional: an agent that can summarise a knowledge-base document with its model (the
    stored summary a whole-document question gets when the document does not fit)."""

    async def summarize_document(self, request: DocumentSummaryRequest) -> SummaryResult | None:
        """The summary, or ``None`` if this agent does not summarise after all."""
        ...


@runtime_checkable
class Agent(Protocol):
    name: str

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        """Answer a turn. Raise ``AgentError`` for a failure worth telling the user about."""
        ...


@runtime_checkable
class Closeable(Protocol):
    """Optional: an agent holding clients to close when the gateway stops."""

    async def aclose(self) -> None: ...


@runtime_checkable
class Calibrating(Protocol):
    """Optional: an agent that sends the prompt exactly as the gateway rendered it and
    reports the server's ``usage.prompt_tokens`` in its first reply's metadata, so the token
    estimate can be calibrated from it."""

    calibrates: bool


@runtime_checkable
class ToolAware(Protocol):
    """Optional: an agent that says whether it calls tools. Agents without this attribute
    are offered the turn's tools (``Turn.tools``/``Turn.toolbox``); ``uses_tools = False``
    skips routing and leaves the whole budget to the transcript."""

    uses_tools: bool


class EchoAgent:
    """Zero-config agent: answers with the newest message's text."""

    name = "echo"
    uses_tools = False

    async def respond(self, turn: Turn) -> Sequence[Reply]:
        if not turn.new_messages:
            return []
        return [Reply(text=f"echo: {turn.new_messages[-1].content}", model="echo")]
