"""What the assistant is in a place: a ``Profile``, the value the turn carries
(``TurnRun.profile``) and the profiles room resolves (``gateway.profiles``). It stands on the
ground floor because both rooms hold it: the turn under the profiles that build on it."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

__all__ = ["AnswerRule", "ConversationRules", "OnDelete", "OnEdit", "Profile", "WhileAnswering"]

AnswerRule = Literal["mentions", "all"]
#: a message that arrives while an answer is written: queued for the next, or the answer
#: restarts to cover it
WhileAnswering = Literal["queue", "restart"]
#: an edit of the thread's latest question after its answer: the answer is written again in
#: place (``update``), or only later turns see the edited text (``context``)
OnEdit = Literal["update", "context"]
#: a deleted message's answer: kept (``keep``), or deleted as well (``retract``)
OnDelete = Literal["keep", "retract"]
ON_EDIT: tuple[OnEdit, ...] = ("update", "context")
ON_DELETE: tuple[OnDelete, ...] = ("keep", "retract")


@dataclass(frozen=True, slots=True)
class ConversationRules:
    """What edits and deletions of a place's messages do once they were answered (its
    profile's ``on_edit`` / ``on_delete``, else ``GATEWAY_ON_EDIT`` / ``GATEWAY_ON_DELETE``);
    the core's door reads them for every edit and deletion."""

    on_edit: OnEdit = "update"
    on_delete: OnDelete = "keep"


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """What the assistant is in the places given to it; ``None`` follows the settings."""

    name: str
    #: replaces AGENT_SYSTEM_PROMPT
    system_prompt: str | None = None
    #: the default model, and what ``/model`` may choose (``models`` defaults to ``[model]``)
    model: str | None = None
    models: tuple[str, ...] | None = None
    #: fnmatch patterns: narrows the tools policy, never widens it; ``()`` offers none
    tools: tuple[str, ...] | None = None
    #: knowledge bases searched besides the thread's and the chat's own
    knowledge: tuple[str, ...] = ()
    answer: AnswerRule | None = None
    streaming: bool | None = None
    #: seconds the thread must be quiet before a turn starts (0..10; 0: off)
    burst_seconds: float | None = None
    while_answering: WhileAnswering | None = None
    #: edits and deletions after the answer (``None``: ``GATEWAY_ON_EDIT`` /
    #: ``GATEWAY_ON_DELETE``)
    on_edit: OnEdit | None = None
    on_delete: OnDelete | None = None
    #: offered when a person opens an assistant thread (Slack's suggested prompts)
    suggested_prompts: tuple[str, ...] = ()
    #: the knowledge base a closing session's minutes are written to; ``None``: no minutes
    minutes_kb: str | None = None

    @property
    def answers_all(self) -> bool | None:
        """The answer policy's input: ``True`` every message, ``False`` mentions only,
        ``None`` not set (the answer-all settings decide)."""
        return None if self.answer is None else self.answer == "all"

    def conversation(self, default: ConversationRules) -> ConversationRules:
        """This profile's rules for edits and deletions over the settings' ``default``."""
        if self.on_edit is None and self.on_delete is None:
            return default
        return ConversationRules(
            on_edit=self.on_edit or default.on_edit, on_delete=self.on_delete or default.on_delete
        )

    def allows_tool(self, name: str) -> bool:
        return self.tools is None or any(fnmatchcase(name, p) for p in self.tools)

    def describe(self) -> dict[str, object]:
        """The profile as JSON (admin API, MCP, ``gateway profiles show --json``)."""
        return {
            "name": self.name,
            "system_prompt": self.system_prompt,
            "model": self.model,
            "models": None if self.models is None else list(self.models),
            "tools": None if self.tools is None else list(self.tools),
            "knowledge": list(self.knowledge),
            "answer": self.answer,
            "streaming": self.streaming,
            "burst_seconds": self.burst_seconds,
            "while_answering": self.while_answering,
            "on_edit": self.on_edit,
            "on_delete": self.on_delete,
            "suggested_prompts": list(self.suggested_prompts),
            "minutes_kb": self.minutes_kb,
        }
