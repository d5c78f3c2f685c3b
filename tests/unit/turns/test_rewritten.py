"""An answer written again for its edited question (``gateway.turns.outgoing.rewritten``):
its text parts edit the old answer's parts in order, longer text adds new messages, a shorter
one deletes the old surplus, and with nothing to edit the answer goes out with a note."""

from __future__ import annotations

from datetime import UTC, datetime

from gateway.core.domain import ReplyTarget
from gateway.core.parts import DeletePart, EditPart, TextPart, from_stored
from gateway.turns.outgoing import EDITED_NOTE, NOTHING_TO_EDIT, rewritten
from session_store.records import DeliveryRecord, OutgoingReply
from session_store.values import as_stored

TARGET = ReplyTarget(platform="web", scope="local", chat_id="c", thread_id="t")


def old(*ids: int) -> list[DeliveryRecord]:
    now = datetime.now(UTC)
    return [
        DeliveryRecord(
            id=i,
            message_id=1,
            session_id=1,
            seq_no=2,
            part_no=n,
            platform="web",
            target=TARGET,
            content=f"old {n}",
            status="sent",
            attempts=1,
            last_error=None,
            platform_message_id=f"gw-{i}",
            next_attempt_at=now,
            created_at=now,
            sent_at=now,
        )
        for n, i in enumerate(ids, start=1)
    ]


def parts(replies: list[OutgoingReply]) -> list[object]:
    found: list[object] = []
    for reply in replies:
        for p in reply.parts:
            stored = as_stored(p)
            found.append(from_stored(stored.kind, stored.content, stored.part, stored.data))
    return found


def answer(*texts: str) -> list[OutgoingReply]:
    return [OutgoingReply(content=" ".join(texts), parts=list(texts))]


def test_each_text_part_edits_the_old_part_in_its_place() -> None:
    assert parts(rewritten(answer("a", "b"), old(7, 8))) == [
        EditPart(text="a", delivery_id=7, note=EDITED_NOTE),
        EditPart(text="b", delivery_id=8, note=EDITED_NOTE),
    ]


def test_a_longer_answer_adds_messages_and_a_shorter_one_deletes_the_rest() -> None:
    longer = parts(rewritten(answer("a", "b", "c"), old(7)))
    assert longer == [
        EditPart(text="a", delivery_id=7, note=EDITED_NOTE),
        TextPart(text="b"),
        TextPart(text="c"),
    ]
    shorter = parts(rewritten(answer("a"), old(7, 8, 9)))
    assert shorter == [
        EditPart(text="a", delivery_id=7, note=EDITED_NOTE),
        DeletePart(delivery_id=8),
        DeletePart(delivery_id=9),
    ]


def test_with_nothing_to_edit_the_answer_goes_out_with_the_note() -> None:
    assert parts(rewritten(answer("a", "b"), [])) == [
        EditPart(text="a", delivery_id=NOTHING_TO_EDIT, note=EDITED_NOTE),
        TextPart(text="b"),
    ]
