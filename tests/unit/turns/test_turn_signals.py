"""What a running turn makes of the signal on its session row: only one about a message it
answers counts (another turn's, or one about a message queued after it, does not); a stop
always counts, an edit or a deletion only while the run may still start over. A turn's
Telegram draft keeps one id across its runs, and the stopped command answers."""

from __future__ import annotations

import pytest

from gateway.outbox.streaming import draft_id
from gateway.turns.scheduler import Change, _signalled
from gateway.turns.stages.commands import NOTHING_TO_STOP, STOPPED_BEFORE, StopCommand
from tests.unit.turns.fakes import fake_turn, message


@pytest.mark.parametrize(
    ("signal", "seq", "revisable", "expected"),
    [
        ("stop", 5, True, Change("stop")),
        ("edit", 6, True, Change("edit")),
        ("delete", 5, True, Change("delete")),
        ("edit", 6, False, None),  # restarted often enough: the answer goes on
        ("stop", 6, False, Change("stop")),
        ("edit", 4, True, None),  # answered by the turn before
        ("edit", 7, True, None),  # queued after this run
        (None, None, True, None),
        ("stop", None, True, None),
    ],
)
def test_a_signal_counts_for_the_messages_the_run_answers(
    signal: str | None, seq: int | None, revisable: bool, expected: Change | None
) -> None:
    turn = fake_turn(message(5, "first"), message(6, "second"), done_seq=4)
    assert _signalled(turn, signal, seq, revisable=revisable) == expected


def test_a_turns_draft_id_is_stable_non_zero_and_fits_32_bits() -> None:
    assert draft_id(3, 7) == draft_id(3, 7) != draft_id(3, 8)
    ids = [draft_id(s, a) for s in (1, 2**40) for a in (0, 1, 2**33)]
    assert all(0 < i < 2**31 for i in ids)


async def test_stop_with_nothing_running_and_stop_before_an_answer_started() -> None:
    alone = fake_turn(message(1, "/stop", command="stop"))
    reply = await StopCommand().answer(alone, alone.asks[0])
    assert reply.text == NOTHING_TO_STOP
    burst = fake_turn(message(1, "a question"), message(2, "/stop", command="stop"))
    reply = await StopCommand().answer(burst, burst.asks[1])
    assert reply.text == STOPPED_BEFORE
    assert [q.seq_no for q in burst.questions] == [2]  # the question is not answered
