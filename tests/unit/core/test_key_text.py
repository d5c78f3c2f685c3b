"""The written form of a session key and of a place: every surface's ids round-trip, ids
that hold ``:`` (Matrix rooms, Teams conversations) or ``%`` are escaped in their part, and
every key of ids holding neither is written exactly as it always was."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.core.domain import SessionKey, escape_part, split_account, unescape_part
from gateway.core.errors import RequestError
from gateway.http.params import SESSION_REF
from gateway.inbound.policy import PlacePattern
from gateway.knowledge.places import Chat, chat_kb, thread_kb
from gateway.profiles.model import place_key
from gateway.schedules.places import parse_place, place_text
from gateway.usage.config import place_matches
from session_store.repos.usage import place_of

#: a Matrix room id before room version 12, on a homeserver with a port
ROOM = "!OGEhHVWSdvArJzumhm:matrix.example.org:8448"
MATRIX = SessionKey(platform="matrix", scope="matrix.example.org:8448", chat_id=ROOM)
TEAMS = SessionKey(
    platform="teams",
    scope="tenant-1",
    chat_id="19:abc@thread.tacv2",
    thread_id="19:abc@thread.tacv2;messageid=123",
)

# no ':' in the platform (it names the surface), nothing empty where a part is required
_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
_keys = st.builds(
    SessionKey,
    platform=_text.filter(lambda t: ":" not in t),
    scope=_text,
    chat_id=_text,
    thread_id=st.none() | _text,
)


@given(_keys)
def test_every_key_reads_back_as_written(key: SessionKey) -> None:
    assert SessionKey.parse(str(key)) == key


@given(_text)
def test_a_part_reads_back_and_holds_no_colon(text: str) -> None:
    assert ":" not in escape_part(text)
    assert unescape_part(escape_part(text)) == text


@given(_text.filter(lambda t: ":" not in t and "%" not in t))
def test_a_part_without_colon_or_percent_is_written_as_it_is(text: str) -> None:
    assert escape_part(text) == text == unescape_part(text)


@pytest.mark.parametrize(
    ("key", "text"),
    [
        (SessionKey(platform="web", scope="local", chat_id="general"), "web:local:general:-"),
        (
            SessionKey(platform="slack", scope="T1", chat_id="C1", thread_id="1700000000.0001"),
            "slack:T1:C1:1700000000.0001",
        ),
        (
            SessionKey(platform="telegram", scope="bot", chat_id="-1001234", thread_id="77"),
            "telegram:bot:-1001234:77",
        ),
        (
            SessionKey(platform="mattermost", scope="chat.example.com:8065/mm", chat_id="ch1"),
            "mattermost:chat.example.com:8065/mm:ch1:-",
        ),
        (
            SessionKey(platform="discord", scope="g1", chat_id="123456789", thread_id="987"),
            "discord:g1:123456789:987",
        ),
        (
            MATRIX,
            "matrix:matrix.example.org:8448:!OGEhHVWSdvArJzumhm%3Amatrix.example.org%3A8448:-",
        ),
        (
            TEAMS,
            "teams:tenant-1:19%3Aabc@thread.tacv2:19%3Aabc@thread.tacv2;messageid=123",
        ),
        (SessionKey(platform="x", scope="s", chat_id="50%", thread_id="-"), "x:s:50%25:%2D"),
    ],
)
def test_the_written_form(key: SessionKey, text: str) -> None:
    assert str(key) == text
    assert SessionKey.parse(text) == key


def test_only_the_escapes_of_a_key_are_decoded() -> None:
    # a %0E or %00 stays as written: no control character comes in through a written key
    key = SessionKey.parse("web:local:a%0Eb%00:c%3ad")
    assert key.chat_id == "a%0Eb%00" and key.thread_id == "c:d"
    assert SessionKey.parse("matrix:example.org%3A8448:r:-").scope == "example.org:8448"


def test_a_url_path_takes_a_key_without_percent_and_a_session_id_for_the_rest() -> None:
    # a client may send a key's %3A unencoded and the server then reads ':' (schemathesis
    # does): a key with an escape is addressed by its session id in a URL path
    assert re.match(SESSION_REF, "slack:T1:C1:1700000000.000100")
    assert re.match(SESSION_REF, "12345")
    assert not re.match(SESSION_REF, str(MATRIX)) and not re.match(SESSION_REF, str(TEAMS))
    assert not re.match(SESSION_REF, "web:local:a%0E:-")


@pytest.mark.parametrize(
    ("pattern", "matched", "missed"),
    [
        ("matrix:*:!OGEhHVWSdvArJzumhm%3Amatrix.example.org%3A8448", MATRIX, TEAMS),
        ("matrix:matrix.example.org%3A8448:*", MATRIX, TEAMS),
        (
            "matrix:matrix.example.org%3a8448:!OGEhHVWSdvArJzumhm%3amatrix.example.org%3a8448",
            MATRIX,
            TEAMS,
        ),
        ("teams:*:19%3Aabc@thread.tacv2:*", TEAMS, MATRIX),
        ("teams:tenant-1:*:19%3Aabc@thread.tacv2;messageid=123", TEAMS, MATRIX),
        ("*:*:*", MATRIX, None),
    ],
)
def test_a_place_pattern_matches_escaped_ids(
    pattern: str, matched: SessionKey, missed: SessionKey | None
) -> None:
    parsed = PlacePattern.parse(pattern)
    assert parsed.matches(matched)
    assert missed is None or not parsed.matches(missed)
    # the unescaped room id is not one part: it is not the room
    assert PlacePattern.parse(str(parsed)) == parsed


@given(_keys.filter(lambda k: not any(c.isspace() for c in f"{k}")))
def test_a_key_written_as_a_place_is_that_key(key: SessionKey) -> None:
    written = [key.platform, key.scope, key.chat_id, *([key.thread_id] if key.thread_id else [])]
    place = ":".join(escape_part(p) for p in written)
    # a place has no white space and a bare * is any; a thread "-" in a place is that id
    if "*" not in written and "-" not in written[3:]:
        assert place_key(place) == key
        assert PlacePattern.parse(place).matches(key)


def test_unescaped_ids_with_colons_are_not_a_place() -> None:
    with pytest.raises(ValueError, match="not platform:scope:chat"):
        PlacePattern.parse(f"matrix:*:{ROOM}")


def test_a_schedule_place_and_a_chat_and_usage_place_use_the_same_form() -> None:
    assert parse_place(str(MATRIX)) == MATRIX
    assert parse_place(place_text(TEAMS)) == TEAMS
    assert parse_place(MATRIX.chat_text.replace("org:8448", "org%3A8448", 1)) == MATRIX
    # a scope with a port: the thread part is written (none: "-"), so it reads back
    assert (
        place_text(MATRIX)
        == "matrix:matrix.example.org:8448:!OGEhHVWSdvArJzumhm%3Amatrix.example.org%3A8448:-"
    )
    assert parse_place(place_text(MATRIX)) == MATRIX
    with pytest.raises(RequestError):
        parse_place("matrix:*:r")
    # a file shared in a thread is announced there: its knowledge base names the key
    assert SessionKey.parse(thread_kb(TEAMS).removeprefix("thread:")) == TEAMS
    chat = Chat.of(TEAMS)
    assert Chat.parse(str(chat)) == chat
    assert chat_kb(TEAMS) == f"chat:{chat}" == "chat:teams:tenant-1:19%3Aabc@thread.tacv2"
    assert place_of(TEAMS) == str(chat)
    assert place_matches("teams:*:19%3Aabc@thread.tacv2", place_of(TEAMS))
    assert place_matches("teams:*:19%3aabc@thread.tacv2", place_of(TEAMS))
    assert not place_matches("teams:*:19", place_of(TEAMS))
    # a scope with a port keeps its ':' in a usage place; the pattern escapes it
    assert place_matches(
        "matrix:*:!OGEhHVWSdvArJzumhm%3Amatrix.example.org%3A8448", place_of(MATRIX)
    )
    assert place_matches("matrix:matrix.example.org%3A8448:*", place_of(MATRIX))
    assert not place_matches("matrix:matrix.example.org:*", place_of(MATRIX))


@pytest.mark.parametrize(
    ("account", "parts"),
    [
        ("slack:T1:U0ALICE", ("slack", "T1", "U0ALICE")),
        ("telegram:bot:-77", ("telegram", "bot", "-77")),
        ("web:local:ann", ("web", "local", "ann")),
        # a scope with a port; a sender without ':'
        ("mattermost:chat.example.org:8065:x1y2", ("mattermost", "chat.example.org:8065", "x1y2")),
        # a Matrix user id holds ':', and the homeserver (the scope) may too
        ("matrix:localhost:@ann:localhost", ("matrix", "localhost", "@ann:localhost")),
        (
            "matrix:matrix.example.org:8448:@ann:example.org:8448",
            ("matrix", "matrix.example.org:8448", "@ann:example.org:8448"),
        ),
        # a Teams channel account id holds ':', its tenant scope never does
        ("teams:tenant-1:29:1a2b", ("teams", "tenant-1", "29:1a2b")),
        ("teams:common:5f1e-aad", ("teams", "common", "5f1e-aad")),
    ],
)
def test_an_account_splits_back_into_the_parts_it_was_joined_from(
    account: str, parts: tuple[str, str, str]
) -> None:
    assert split_account(account) == parts
    assert ":".join(parts) == account  # stored accounts are joined unescaped, as always


@given(
    scope=st.from_regex(r"[a-z0-9.-]{1,12}(:[0-9]{1,5})?", fullmatch=True),
    local=st.from_regex(r"[a-z0-9._=/+-]{1,12}", fullmatch=True),
    server=st.from_regex(r"[a-z0-9.-]{1,12}(:[0-9]{1,5})?", fullmatch=True),
)
def test_every_matrix_account_splits_back(scope: str, local: str, server: str) -> None:
    sender = f"@{local}:{server}"
    assert split_account(f"matrix:{scope}:{sender}") == ("matrix", scope, sender)


@pytest.mark.parametrize("text", ["slack", "slack:T1", "slack::U1", ":T1:U1", "teams:t1:"])
def test_what_is_no_account_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an account"):
        split_account(text)


@given(_keys)
def test_every_key_reads_back_as_a_place(key: SessionKey) -> None:
    text = place_text(key)
    assume("*" not in text and text == text.strip())
    assert parse_place(text) == key
