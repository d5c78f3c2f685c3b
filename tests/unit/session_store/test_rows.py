"""Records built from rows by their fields (``session_store.rows``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, NamedTuple

import pytest

from session_store.records import (
    MessageRecord,
    SearchHit,
    SessionRecord,
    TurnState,
    context_from_row,
    context_from_values,
)
from session_store.rows import SKIP, Column, field_names, from_row, or_empty, reader
from session_store.values import ReplyTarget, SessionKey

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class Thing:
    id: int
    label: str
    tags: Mapping[str, Any]
    score: float
    where: SessionKey
    cached: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    row_columns: ClassVar[Mapping[str, Column]] = {
        "label": Column(name="name"),
        "tags": Column(convert=or_empty),
        "score": Column(convert=float),
        "where": Column(convert=reader(SessionKey), whole_row=True),
        "cached": SKIP,
        "extra": SKIP,
    }


ROW = {
    "id": 7,
    "name": "seven",
    "tags": None,
    "score": "1.5",
    "platform": "slack",
    "scope": "T1",
    "chat_id": "C1",
    "thread_id": None,
}


def test_each_field_is_read_from_its_column_and_only_the_declared_ones_differ() -> None:
    thing = from_row(Thing, ROW)
    assert thing == Thing(
        id=7,
        label="seven",
        tags={},
        score=1.5,
        where=SessionKey(platform="slack", scope="T1", chat_id="C1"),
    )


def test_a_null_can_skip_its_converter() -> None:
    @dataclass(frozen=True)
    class Maybe:
        when: datetime | None
        row_columns: ClassVar[Mapping[str, Column]] = {
            "when": Column(convert=datetime.fromisoformat, if_null=None)
        }

    assert from_row(Maybe, {"when": None}) == Maybe(when=None)
    assert from_row(Maybe, {"when": NOW.isoformat()}) == Maybe(when=NOW)


def test_a_missing_column_is_an_error_not_a_silent_default() -> None:
    with pytest.raises(KeyError, match="score"):
        from_row(Thing, {k: v for k, v in ROW.items() if k != "score"})


def test_the_reader_is_made_once_per_record_and_prefix() -> None:
    assert reader(Thing) is reader(Thing)
    assert reader(Thing, prefix="t_") is not reader(Thing)
    prefixed = {f"t_{k}": v for k, v in ROW.items() if k in ("id", "name", "tags", "score")}
    # a whole-row converter gets the whole row, whatever the prefix
    prefixed |= {k: v for k, v in ROW.items() if k not in prefixed}
    assert from_row(Thing, prefixed, prefix="t_").label == "seven"


def test_a_declaration_naming_no_field_is_refused() -> None:
    @dataclass(frozen=True)
    class Bad:
        id: int
        row_columns: ClassVar[Mapping[str, Column]] = {"idd": Column(name="x")}

    with pytest.raises(TypeError, match="names no field"):
        reader(Bad)


class Pair(NamedTuple):
    a: int
    b: tuple[int, ...]


def test_a_named_tuple_is_built_positionally_by_name_or_by_position() -> None:
    columns = {"b": Column(convert=tuple)}
    assert reader(Pair, columns=columns)({"a": 1, "b": [2, 3]}) == Pair(1, (2, 3))
    assert reader(Pair, columns=columns, by_position=True)((1, [2])) == Pair(1, (2,))
    with pytest.raises(TypeError, match="neither"):
        field_names(int)


def test_the_store_records_read_their_rows() -> None:
    target = {"platform": "slack", "scope": "T1", "chat_id": "C1", "thread_id": "1.2"}
    message = from_row(
        MessageRecord,
        {
            "id": 1,
            "session_id": 2,
            "seq_no": 3,
            "role": "user",
            "content": "hi",
            "sender_id": "U1",
            "sender_name": None,
            "external_id": "e",
            "command": None,
            "trigger": "answer",
            "backfill": False,
            "reply_target": target,
            "model": None,
            "tokens_used": None,
            "feedback": None,
            "edited_at": None,
            "created_at": NOW,
            "metadata": None,
        },
    )
    assert message.reply_target == ReplyTarget.from_json(target)
    assert message.metadata == {} and message.deliveries == ()
    session = from_row(
        SessionRecord,
        {
            "id": 2,
            "platform": "slack",
            "scope": "T1",
            "chat_id": "C1",
            "thread_id": None,
            "status": "active",
            "title": None,
            "kind": "chat",
            "selected_model": None,
            "last_seq_no": 3,
            "message_count": 3,
            "created_at": NOW,
            "updated_at": NOW,
            "last_message_at": None,
            "closed_at": None,
            "metadata": {"a": 1},
        },
    )
    assert session.key == SessionKey(platform="slack", scope="T1", chat_id="C1")
    hit = from_row(
        SearchHit,
        {
            "id": 1,
            "session_id": 2,
            "platform": "slack",
            "scope": "T1",
            "chat_id": "C1",
            "thread_id": None,
            "title": "t",
            "status": "closed",
            "seq_no": 3,
            "role": "user",
            "sender_name": None,
            "snippet": "«hi»",
            "rank": 0.5,
            "created_at": NOW,
        },
    )
    assert (hit.message_id, hit.session_title, hit.session_status) == (1, "t", "closed")


def test_a_turn_state_reads_its_summary_from_the_prefixed_columns_when_there_is_one() -> None:
    base = {
        "metadata": None,
        "title": None,
        "selected_model": "m",
        "user_model": None,
        "place": {"chat": "x"},
        "summary_id": None,
    }
    assert from_row(TurnState, base).summary is None
    summary = {
        "summary_id": 5,
        "summary_session_id": 2,
        "summary_from_seq": 1,
        "summary_to_seq": 9,
        "summary_content": "so far",
        "summary_model": None,
        "summary_model_written": True,
        "summary_created_at": NOW,
    }
    state = from_row(TurnState, base | summary)
    assert state.session_metadata == {} and state.place == {"chat": "x"}
    assert state.summary is not None and (state.summary.id, state.summary.to_seq) == (5, 9)


def test_a_context_row_reads_the_same_by_name_and_by_position() -> None:
    row = {
        "id": 1,
        "seq_no": 2,
        "role": "assistant",
        "content": "x",
        "sender_id": None,
        "sender_name": None,
        "answers_seq": 1,
        "tool_calls": [{"id": "c"}, "junk"],
        "tool_call_id": None,
    }
    by_name = context_from_row(row)
    assert by_name == context_from_values(tuple(row.values()))
    assert by_name.tool_calls == ({"id": "c"},)
    assert context_from_row(row | {"tool_calls": None}).tool_calls == ()
