"""A schedule's firing is a turn of its own (``gateway.turns.stage.one_firing_a_turn``)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.turns.stage import one_firing_a_turn
from session_store.records import MessageRecord
from tests.unit.turns.fakes import message


def firing(seq: int, prompt: str) -> MessageRecord:
    return message(seq, prompt, role="system", trigger=None, metadata={"schedule_id": seq})


def seqs(pending: Sequence[MessageRecord]) -> list[int]:
    return [m.seq_no for m in pending]


def test_without_a_firing_the_turn_takes_every_pending_message() -> None:
    pending = [message(1, "hi"), message(2, "and?")]
    taken, left = one_firing_a_turn(pending)
    assert (seqs(taken), left) == ([1, 2], False)


def test_a_firing_first_is_a_turn_alone() -> None:
    pending = [firing(1, "checklist"), firing(2, "blocking?"), message(3, "hi")]
    taken, left = one_firing_a_turn(pending)
    assert (seqs(taken), left) == ([1], True)
    taken, left = one_firing_a_turn(pending[1:])
    assert (seqs(taken), left) == ([2], True)
    taken, left = one_firing_a_turn(pending[2:])
    assert (seqs(taken), left) == ([3], False)


def test_messages_before_a_firing_are_answered_without_it() -> None:
    pending = [message(1, "hi"), message(2, "chatter", trigger="context"), firing(3, "report")]
    taken, left = one_firing_a_turn(pending)
    assert (seqs(taken), left) == ([1, 2], True)


def test_nothing_pending_is_nothing_left() -> None:
    assert one_firing_a_turn([]) == ([], False)
