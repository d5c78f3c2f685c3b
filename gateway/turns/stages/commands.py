"""Commands: ``/new``, ``/help``, ``/model`` and every command a capability adds, answered by
the gateway without the agent.

The vocabulary is ``gateway.core.commands.COMMANDS``. Each command but ``/new`` and ``/pause``
is answered by a :class:`CommandHandler`; a capability adds one by passing its handler to the
stage (one line in ``gateway.runtime.stages.turn_stages``). Before the agent: ``/new`` ends the
turn at itself and closes the session, ``/pause`` ends it at itself and pauses the session (what
arrives is stored, nothing is answered until ``/resume``); the others are answered in seq order
(so ``/model x`` sent before a question applies to it) and taken out of the questions. ``/resume``
reaches a turn because its ingest made the session active again, so the messages that arrived
while it was paused are answered in the same turn; ``/decision TEXT`` was stored as a decision at
ingest and is acknowledged here. A known command with no handler in this gateway (its capability
is off) gets a short answer saying so. After: nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import structlog

from gateway.core.commands import COMMANDS, decision_text
from gateway.core.domain import Reply
from gateway.turns.context import ContextPolicy
from gateway.turns.stage import COMMAND_MODEL, Answer, Stage, TurnRun
from session_store.errors import RequestError
from session_store.records import MessageRecord, SessionRecord, TurnState

log = structlog.get_logger(__name__)

HELP_INTRO = "I answer in this thread, with this thread's history as context."
NEW_TEXT = "Started a new session. Earlier messages in this thread are no longer used as context."
PAUSE_TEXT = (
    "Paused. Messages sent here are kept, and nothing is answered until someone sends /resume."
)
RESUME_TEXT = "Resumed: this session is active and answered again."
DECISION_USAGE = "Nothing recorded: write the decision after the command, /decision TEXT."
#: ``/stop`` with no answer being written (a running answer is stopped by its turn, which
#: sees the ``/stop`` arrive: ``gateway.turns.scheduler``)
NOTHING_TO_STOP = "Nothing to stop."
STOPPED_BEFORE = "Stopped: the messages before /stop are not answered."


class CommandHandler(Protocol):
    """The answer to one command (``gateway.core.commands.COMMANDS``)."""

    #: the command's name, without the slash
    name: str

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply: ...


def help_text(names: Sequence[str]) -> str:
    """``/help``: the commands this gateway answers, in the vocabulary's order."""
    lines = [HELP_INTRO, "Commands:"]
    lines += [f"/{c.name} - {c.summary}" for c in COMMANDS.values() if c.name in names]
    return "\n".join(lines)


class ModelChoices(Protocol):
    """What ``/model`` reads and writes (``session_store.repos.turns.Turns``)."""

    async def turn_state(
        self,
        session_id: int,
        *,
        question_seq: int,
        upto_seq: int,
        user_platform: str,
        user_id: str | None,
    ) -> TurnState: ...

    async def set_model_choice(
        self, session_id: int, *, platform: str, user_id: str | None, model: str
    ) -> None: ...


class Lifecycle(Protocol):
    """What ``/pause`` moves (``session_store.repos.sessions.Sessions``)."""

    async def transition(self, session_id: int, step: str) -> SessionRecord: ...


class CommandsStage(Stage):
    name = "commands"

    def __init__(
        self,
        choices: ModelChoices,
        policy: ContextPolicy,
        handlers: Sequence[CommandHandler] = (),
        *,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        answers: list[CommandHandler] = [ModelCommand(choices, policy), StopCommand(), *handlers]
        if lifecycle is not None:
            answers += [ResumeCommand(), DecisionCommand()]
        self._handlers = {h.name: h for h in answers}
        self._lifecycle = lifecycle
        paused = ["pause"] if lifecycle is not None else []
        self.help_text = help_text(["new", "help", *paused, *self._handlers])

    async def before(self, turn: TurnRun) -> Answer | None:
        # a /pause typed while the session was paused waited with the rest; the /resume that
        # brought this turn overrides it
        resumed = max((i for i, m in enumerate(turn.asks) if m.command == "resume"), default=-1)
        for i, ask in enumerate(turn.asks):
            if ask.command == "new":
                # handle up to /new; anything after it in this batch gets its own run
                return Answer(
                    outcome="command_new",
                    replies=[Reply(text=NEW_TEXT, model=COMMAND_MODEL)],
                    upto=ask,
                    close_session=True,
                )
            if ask.command == "pause" and i > resumed and self._lifecycle is not None:
                # handle up to /pause: what follows waits, stored, for /resume
                return Answer(
                    outcome="command_pause",
                    replies=[Reply(text=await self._pause(turn), model=COMMAND_MODEL)],
                    upto=ask,
                )
        for ask in turn.asks:
            if ask.command == "pause" and self._lifecycle is not None:
                turn.replies.append(
                    Reply(text="Overridden by a later /resume.", model=COMMAND_MODEL)
                )
            elif ask.command is not None:
                turn.replies.append(await self._answer(turn, ask, ask.command))
        commands = [m for m in turn.questions if m.command is not None]
        if commands:
            turn.questions = [m for m in turn.questions if m.command is None]
            turn.outcome = f"command_{commands[-1].command}"
        return None

    async def _pause(self, turn: TurnRun) -> str:
        assert self._lifecycle is not None
        try:
            await self._lifecycle.transition(turn.claim.session_id, "pause")
        except RequestError as e:
            return f"Not paused: {e}"
        log.info("session_paused", session_id=turn.claim.session_id)
        return PAUSE_TEXT

    async def _answer(self, turn: TurnRun, ask: MessageRecord, command: str) -> Reply:
        if command == "help":
            return Reply(text=self.help_text, model=COMMAND_MODEL)
        handler = self._handlers.get(command)
        if handler is None:
            return Reply(text=f"/{command} is not available here.", model=COMMAND_MODEL)
        return await handler.answer(turn, ask)


class ModelCommand:
    """``/model``: list the allowed models; ``/model NAME``: this session uses NAME, and it
    becomes this person's choice wherever no session choice is set."""

    name = "model"

    def __init__(self, choices: ModelChoices, policy: ContextPolicy) -> None:
        self._choices = choices
        self._policy = policy

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        allowed = (turn.policy or self._policy).allowed
        wanted = command_argument(ask.content, "model")
        if wanted is None:
            return await self._list_models(turn, ask)
        name = next((m for m in allowed if m == wanted), None) or next(
            (m for m in allowed if m.lower() == wanted.lower()), None
        )
        if name is None:
            return Reply(
                text=f"Unknown model {wanted!r}. Available: {', '.join(allowed)}.",
                model=COMMAND_MODEL,
            )
        claim = turn.claim
        await self._choices.set_model_choice(
            claim.session_id, platform=claim.key.platform, user_id=ask.sender_id, model=name
        )
        log.info("model_selected", model=name)
        return Reply(
            text=f"This thread now uses {name} (and so will new threads of yours that have "
            "no model of their own).",
            model=COMMAND_MODEL,
        )

    async def _list_models(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        policy = turn.policy or self._policy
        state = await self._choices.turn_state(
            turn.claim.session_id,
            question_seq=ask.seq_no,
            upto_seq=ask.seq_no,
            user_platform=turn.claim.key.platform,
            user_id=ask.sender_id,
        )
        current, _ = policy.resolve(
            session_choice=state.selected_model, user_choice=state.user_model
        )
        lines = ["Models:"]
        for model in policy.allowed:
            flags = (
                ("default", model == policy.default_model),
                ("in use here", model == current),
            )
            notes = [note for note, on in flags if on]
            lines.append(f"- {model}" + (f" ({', '.join(notes)})" if notes else ""))
        lines.append("Switch this thread with /model NAME.")
        return Reply(text="\n".join(lines), model=COMMAND_MODEL)


class StopCommand:
    """``/stop`` that reached a turn of its own: no answer was being written when it arrived
    (a running one sees it and stops). Questions sent just before it, answered together with it
    (a burst window, a queue), are not answered."""

    name = "stop"

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        earlier = [q for q in turn.questions if q.command is None and q.seq_no < ask.seq_no]
        if not earlier:
            return Reply(text=NOTHING_TO_STOP, model=COMMAND_MODEL)
        turn.questions = [
            q for q in turn.questions if q.command is not None or q.seq_no > ask.seq_no
        ]
        return Reply(text=STOPPED_BEFORE, model=COMMAND_MODEL)


class ResumeCommand:
    """``/resume``: its ingest made the paused session active again (nothing else can claim
    a paused session's turn), so here it is only acknowledged; the messages that arrived while
    the session was paused stay in the turn's questions and are answered with it."""

    name = "resume"

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        return Reply(text=RESUME_TEXT, model=COMMAND_MODEL)


class DecisionCommand:
    """``/decision TEXT``: stored with kind ``decision`` at ingest (the kind rides in the
    message's own insert); acknowledged here, and never sent to the model as a question."""

    name = "decision"

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        if ask.kind != "decision":
            return Reply(text=DECISION_USAGE, model=COMMAND_MODEL)
        return Reply(text=f"Decision recorded: {decision_text(ask.content)}", model=COMMAND_MODEL)


def command_argument(text: str, command: str) -> str | None:
    """``/model gpt-4o`` (or ``/model@bot gpt-4o``, or after a mention) -> ``gpt-4o``."""
    words = text.split()
    for i, word in enumerate(words):
        if word.lower().split("@", 1)[0] == f"/{command}":
            return words[i + 1] if i + 1 < len(words) else None
    return None
