"""The commands stage answers /new, /help and /model itself, on a fake turn."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from gateway.core.commands import decision_text
from gateway.core.domain import Reply
from gateway.turns.context import ContextPolicy
from gateway.turns.stage import COMMAND_MODEL, TurnRun
from gateway.turns.stages.commands import (
    DECISION_USAGE,
    NEW_TEXT,
    PAUSE_TEXT,
    RESUME_TEXT,
    CommandsStage,
    command_argument,
    help_text,
)
from session_store.errors import RequestError
from session_store.records import MessageRecord, SessionRecord, TurnState
from tests.unit.turns.fakes import fake_turn, message, target, texts

POLICY = ContextPolicy(default_model="small", allowed_models=("small", "Large"))
HELP = help_text(["new", "model", "stop", "help"])


class Choices:
    """Model choices in memory (``Store.turn_state`` / ``set_model_choice``)."""

    def __init__(self, selected: str | None = None) -> None:
        self.selected = selected
        self.set: list[tuple[int, str, str | None, str]] = []

    async def turn_state(
        self,
        session_id: int,
        *,
        question_seq: int,
        upto_seq: int,
        user_platform: str,
        user_id: str | None,
    ) -> TurnState:
        return TurnState(
            session_metadata={},
            title=None,
            selected_model=self.selected,
            user_model=None,
            place={},
            summary=None,
        )

    async def set_model_choice(
        self, session_id: int, *, platform: str, user_id: str | None, model: str
    ) -> None:
        self.set.append((session_id, platform, user_id, model))
        self.selected = model


async def test_help_alone_is_answered_and_leaves_nothing_for_the_agent() -> None:
    turn = fake_turn(message(1, "/help", command="help"))
    assert await CommandsStage(Choices(), POLICY).before(turn) is None
    assert texts(turn) == [HELP]
    assert turn.questions == [] and turn.outcome == "command_help"


async def test_a_model_chosen_before_a_question_applies_to_it_and_the_question_stays() -> None:
    choices = Choices()
    turn = fake_turn(message(1, "/model large", command="model"), message(2, "hello"))
    assert await CommandsStage(choices, POLICY).before(turn) is None
    # matched case-insensitively, stored for the session and this person
    assert choices.set == [(1, "web", "ann", "Large")]
    assert texts(turn)[0].startswith("This thread now uses Large")
    assert [m.content for m in turn.questions] == ["hello"]


async def test_model_without_a_name_lists_the_models_with_the_one_in_use() -> None:
    turn = fake_turn(message(1, "/model", command="model"))
    await CommandsStage(Choices(selected="Large"), POLICY).before(turn)
    assert texts(turn) == [
        "Models:\n- small (default)\n- Large (in use here)\nSwitch this thread with /model NAME."
    ]


async def test_an_unknown_model_is_refused_and_nothing_is_stored() -> None:
    choices = Choices()
    turn = fake_turn(message(1, "/model huge", command="model"))
    await CommandsStage(choices, POLICY).before(turn)
    assert choices.set == [] and texts(turn) == ["Unknown model 'huge'. Available: small, Large."]


async def test_new_ends_the_turn_at_itself_and_closes_the_session() -> None:
    turn = fake_turn(
        message(1, "/help", command="help"),
        message(2, "/new", command="new", thread="t2"),
        message(3, "after the new session"),
    )
    answer = await CommandsStage(Choices(), POLICY).before(turn)
    assert answer is not None and answer.outcome == "command_new"
    assert turn.end_with(answer) == "command_new"
    # handled up to /new only: the message after it gets its own run, in /new's thread
    assert turn.handled_seq == 2 and turn.close_session and turn.target == target("t2")
    assert texts(turn) == [NEW_TEXT]


def test_the_argument_follows_the_command_wherever_it_is() -> None:
    assert command_argument("/model gpt-4o", "model") == "gpt-4o"
    assert command_argument("@bot /MODEL@bot big one", "model") == "big"
    assert command_argument("/model", "model") is None
    assert command_argument("/help me", "model") is None


class Echoing:
    """A capability's command: answers with its argument."""

    name = "profile"

    async def answer(self, turn: TurnRun, ask: MessageRecord) -> Reply:
        return Reply(text=f"profile of {turn.claim.key.chat_id}", model=COMMAND_MODEL)


async def test_a_capability_adds_a_command_and_help_lists_it() -> None:
    turn = fake_turn(message(1, "/profile", command="profile"), message(2, "/help", command="help"))
    stage = CommandsStage(Choices(), POLICY, handlers=[Echoing()])
    assert await stage.before(turn) is None
    answer, listing = texts(turn)
    assert answer.startswith("profile of ")
    assert "/profile - " in listing and "/usage" not in listing
    assert turn.questions == []


async def test_a_known_command_whose_capability_is_off_says_so() -> None:
    turn = fake_turn(message(1, "/usage", command="usage"))
    assert await CommandsStage(Choices(), POLICY).before(turn) is None
    assert texts(turn) == ["/usage is not available here."]
    assert "/usage" not in HELP and "/model - " in HELP


class Moves:
    """The lifecycle in memory (``Sessions.transition``), refusing what the store refuses."""

    def __init__(self, status: str = "active") -> None:
        self.status = status
        self.steps: list[tuple[int, str]] = []

    async def transition(self, session_id: int, step: str) -> SessionRecord:
        if step == "pause" and self.status != "active":
            raise RequestError(f"session {session_id} is {self.status}; pause needs active")
        self.steps.append((session_id, step))
        self.status = "paused"
        return cast(SessionRecord, None)


async def test_pause_ends_the_turn_at_itself_and_pauses_the_session() -> None:
    moves = Moves()
    turn = fake_turn(message(1, "/pause", command="pause"), message(2, "after the pause"))
    answer = await CommandsStage(Choices(), POLICY, lifecycle=moves).before(turn)
    assert answer is not None and answer.outcome == "command_pause"
    turn.end_with(answer)
    # handled up to /pause only: what follows waits for /resume
    assert turn.handled_seq == 1 and not turn.close_session
    assert moves.steps == [(1, "pause")] and texts(turn) == [PAUSE_TEXT]


async def test_a_refused_pause_says_why() -> None:
    turn = fake_turn(message(1, "/pause", command="pause"))
    answer = await CommandsStage(Choices(), POLICY, lifecycle=Moves("closed")).before(turn)
    assert answer is not None
    assert [r.text for r in answer.replies] == [
        "Not paused: session 1 is closed; pause needs active"
    ]


async def test_resume_is_acknowledged_and_what_waited_is_answered_in_the_same_turn() -> None:
    moves = Moves()
    turn = fake_turn(
        message(1, "while paused"),
        message(2, "/pause", command="pause"),  # typed while paused: the later /resume wins
        message(3, "/resume", command="resume"),
        message(4, "and this"),
    )
    assert await CommandsStage(Choices(), POLICY, lifecycle=moves).before(turn) is None
    assert moves.steps == []
    assert texts(turn) == ["Overridden by a later /resume.", RESUME_TEXT]
    assert [m.content for m in turn.questions] == ["while paused", "and this"]


async def test_decision_is_acknowledged_and_not_asked() -> None:
    decided = replace(message(1, "/decision ship on Monday", command="decision"), kind="decision")
    bare = message(2, "/decision", command="decision")  # stored as chat at ingest
    turn = fake_turn(decided, bare)
    assert await CommandsStage(Choices(), POLICY, lifecycle=Moves()).before(turn) is None
    assert texts(turn) == ["Decision recorded: ship on Monday", DECISION_USAGE]
    assert turn.questions == []
    assert decision_text("@bot /decision@bot  use   Postgres ") == "use   Postgres"


def test_help_lists_the_lifecycle_commands_only_where_they_are_answered() -> None:
    assert "/pause" not in CommandsStage(Choices(), POLICY).help_text
    text = CommandsStage(Choices(), POLICY, lifecycle=Moves()).help_text
    assert all(f"/{c} - " in text for c in ("pause", "resume", "decision", "new", "help"))
