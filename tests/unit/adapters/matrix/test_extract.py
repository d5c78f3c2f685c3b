"""The Matrix extract (pure): the session rule, the facts it reports, edits, redactions,
encrypted events and files; and the transport's HTML and splitting."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.matrix.extract import Context, RoomFacts, extract_event, reaction_of
from adapters.matrix.transport import MatrixTransport, html_of, relates, text_content
from gateway.core.domain import Envelope, EventKind, Ignored, Rejected, ReplyTarget

BOT = "@bot:hs.example"
CTX = Context(scope="hs.example", bot_user_id=BOT)
GROUP = RoomFacts(room_id="!room:hs.example", direct=False, name="Team")
DIRECT = RoomFacts(room_id="!dm:hs.example", direct=True)


def message(
    body: str,
    *,
    event_id: str = "$e1",
    sender: str = "@ann:hs.example",
    extra: dict[str, Any] | None = None,
    **fields: Any,
):
    content: dict[str, Any] = {"msgtype": "m.text", "body": body, **fields, **(extra or {})}
    return {
        "type": "m.room.message",
        "event_id": event_id,
        "sender": sender,
        "origin_server_ts": 1_700_000_000_000,
        "content": content,
    }


def envelope(event: dict[str, Any], room: RoomFacts = GROUP) -> Envelope:
    got = extract_event(event, ctx=CTX, room=room)
    assert isinstance(got, Envelope), got
    return got


def test_a_top_level_message_in_a_room_roots_its_own_thread() -> None:
    got = envelope(message(f"{BOT}: hi", extra={"m.mentions": {"user_ids": [BOT]}}))
    assert got.key.thread_id == "$e1" and got.target.thread_id == "$e1"
    assert got.facts is not None and got.facts.mentioned and not got.facts.direct
    assert not got.facts.thread_reply
    assert got.place.chat_name == "Team"


def test_a_message_in_a_thread_is_that_threads_session() -> None:
    relation = {"rel_type": "m.thread", "event_id": "$root", "is_falling_back": True}
    got = envelope(message("more", event_id="$e2", extra={"m.relates_to": relation}))
    assert got.key.thread_id == "$root" and got.target.thread_id == "$root"
    assert got.target.reply_to_message_id == "$e2"
    assert got.facts is not None and got.facts.thread_reply and not got.facts.mentioned


def test_a_direct_room_is_one_session_answered_in_the_room() -> None:
    got = envelope(message("hello"), DIRECT)
    assert got.key.thread_id is None and got.target.thread_id is None
    assert got.facts is not None and got.facts.direct and got.place.direct


def test_the_bots_own_message_and_a_notice_are_reported_as_such() -> None:
    own = envelope(message("echo", sender=BOT))
    assert own.facts is not None and own.facts.from_self
    notice = envelope(message("a bridge says", msgtype="m.notice"))
    assert notice.facts is not None and notice.facts.from_bot


def test_a_command_after_the_mention_is_read() -> None:
    assert envelope(message(f"{BOT}: /new")).command == "new"
    assert envelope(message("bot: /help")).command == "help"


def test_an_edit_is_the_edit_of_its_target() -> None:
    event = message(
        "* better",
        event_id="$edit",
        extra={
            "m.new_content": {"msgtype": "m.text", "body": "better"},
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$e1"},
        },
    )
    got = envelope(event)
    assert got.kind is EventKind.EDIT
    assert (got.message_id, got.event_id, got.text) == ("$e1", "$edit", "better")


@pytest.mark.parametrize("where", ["top", "content"])
def test_a_redaction_is_the_deletion_of_its_target(where: str) -> None:
    event: dict[str, Any] = {
        "type": "m.room.redaction",
        "event_id": "$red",
        "sender": "@ann:hs.example",
        "content": {"redacts": "$e1"} if where == "content" else {},
    }
    if where == "top":
        event["redacts"] = "$e1"
    got = envelope(event)
    assert got.kind is EventKind.DELETE and got.message_id == "$e1" and got.text == ""


def test_an_encrypted_event_is_never_read() -> None:
    event = {
        "type": "m.room.encrypted",
        "event_id": "$enc",
        "sender": "@ann:hs.example",
        "content": {"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "x"},
    }
    got = extract_event(event, ctx=CTX, room=GROUP)
    assert isinstance(got, Ignored) and "encrypted" in got.reason


def test_a_file_is_an_attachment_with_its_caption() -> None:
    event = message(
        "what is this?",
        msgtype="m.image",
        filename="cat.png",
        url="mxc://hs.example/abc",
        info={"mimetype": "image/png", "size": 12},
    )
    got = envelope(event, DIRECT)
    [file] = got.attachments
    assert (file.kind, file.name, file.file_id, file.size) == (
        "image",
        "cat.png",
        "mxc://hs.example/abc",
        12,
    )
    assert got.text == "what is this?"


def test_a_reaction_is_read_as_an_annotation() -> None:
    event = {
        "type": "m.reaction",
        "sender": "@ann:hs.example",
        "content": {"m.relates_to": {"rel_type": "m.annotation", "event_id": "$c", "key": "✅"}},
    }
    found = reaction_of(event, "!room:hs.example")
    assert found is not None and (found.event_id, found.key) == ("$c", "✅")


NASTY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.mark.untraced
@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["m.room.message", "m.room.redaction", "m.reaction", "x", None]),
    content=NASTY,
    relation=NASTY,
)
def test_no_input_makes_extract_raise(kind: Any, content: Any, relation: Any) -> None:
    if isinstance(content, dict):
        content["m.relates_to"] = relation
    event = {"type": kind, "event_id": "$x", "sender": "@a:b", "content": content}
    got = extract_event(event, ctx=CTX, room=GROUP)
    assert isinstance(got, Envelope | Ignored | Rejected)
    reaction_of(event, "!r")


def test_markdown_goes_as_html_with_raw_html_escaped() -> None:
    content = text_content("**bold** <script>x</script>")
    assert content["format"] == "org.matrix.custom.html"
    assert content["body"] == "**bold** <script>x</script>"
    assert "<strong>bold</strong>" in content["formatted_body"]
    assert "<script>" not in html_of("<script>x</script>")


def test_a_long_answer_is_split_into_events_under_the_size_limit() -> None:
    transport = MatrixTransport(api=None, scope="hs")  # type: ignore[arg-type]
    text = " ".join(["<b>&</b>"] * 12000)
    parts = transport.parts(text)
    assert len(parts) > 1 and " ".join(parts) == text
    target = ReplyTarget(platform="matrix", scope="hs", chat_id="!r", thread_id="$root")
    for part in parts:
        event = {**text_content(part), **relates(target)}
        assert len(json.dumps(event, ensure_ascii=False).encode()) < 65536


def test_the_account_is_paced_as_configured_synapse_default_unless_raised() -> None:
    from adapters.matrix.adapter import MatrixConfig
    from adapters.matrix.settings import MatrixSettings

    target = ReplyTarget(platform="matrix", scope="hs", chat_id="!r:hs", thread_id=None)
    plain = MatrixSettings.model_validate(
        {"MATRIX_HOMESERVER_URL": "http://hs", "MATRIX_ACCESS_TOKEN": "t"}
    )
    raised = MatrixSettings.model_validate(
        {
            "MATRIX_HOMESERVER_URL": "http://hs",
            "MATRIX_ACCESS_TOKEN": "t",
            "MATRIX_MESSAGES_PER_SECOND": "4",
        }
    )
    for settings_, interval in ((plain, 5.0), (raised, 0.25)):
        config = MatrixConfig.from_settings(settings_)
        transport = MatrixTransport(
            api=None,  # type: ignore[arg-type]
            scope="hs",
            messages_per_second=config.messages_per_second,
        )
        account = [rule for rule in transport.pace(target) if rule.key.startswith("account:")]
        assert [(rule.interval, rule.burst) for rule in account] == [(interval, 10)]
