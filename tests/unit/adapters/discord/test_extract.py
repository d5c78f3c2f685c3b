"""Discord's extraction, pure: the session rule (a channel message roots its own thread, a
thread or forum post is its thread, a DM is one place), the facts the core decides from,
edits and deletions as annotations, and what is refused."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from adapters.discord.extract import (
    BotIdentity,
    Channel,
    extract_message,
    thread_name,
)
from gateway.core.domain import Envelope, EventKind, Ignored, Rejected, Trigger
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from tests.unit.adapters.test_fuzz_extract import FUZZ, NASTY, _check

BOT = BotIdentity(user_id="900", username="gatewaybot")
GUILD = "500"
GENERAL = Channel(id="600", type=0, guild_id=GUILD, name="general")
THREAD = Channel(id="700", type=11, guild_id=GUILD, parent_id="600", name="a thread")
FORUM_POST = Channel(id="710", type=11, guild_id=GUILD, parent_id="650", name="Install fails")
DM = Channel(id="800", type=1)


def _message(channel: Channel, content: str, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": "1001",
        "channel_id": channel.id,
        "author": {"id": "42", "username": "alice", "global_name": "Alice"},
        "content": content,
        "timestamp": "2026-12-07T10:00:00+00:00",
        "mentions": [],
        "type": 0,
        **extra,
    }
    if channel.guild_id:
        message["guild_id"] = channel.guild_id
    return message


def _envelope(extracted: object) -> Envelope:
    assert isinstance(extracted, Envelope), extracted
    return extracted


def test_a_channel_message_is_the_root_of_its_own_thread() -> None:
    e = _envelope(
        extract_message(
            _message(GENERAL, "<@900> where are the docs?", mentions=[{"id": "900"}]),
            bot=BOT,
            channel=GENERAL,
        )
    )
    assert (e.key.scope, e.key.chat_id, e.key.thread_id) == (GUILD, "600", "1001")
    assert (e.target.chat_id, e.target.thread_id) == ("600", "1001")
    assert e.target.extra == {"thread_name": "where are the docs?"}
    assert e.text == "@gatewaybot where are the docs?"
    assert e.facts is not None and e.facts.mentioned and not e.facts.direct
    assert e.event_id == "message:1001" and e.message_id == "1001"


def test_a_thread_message_and_a_forum_post_are_their_threads_session() -> None:
    e = _envelope(extract_message(_message(THREAD, "and the api?"), bot=BOT, channel=THREAD))
    assert (e.key.chat_id, e.key.thread_id) == ("600", "700")
    assert e.target.extra == {}  # the thread exists: nothing to start
    assert e.facts is not None and e.facts.thread_reply and not e.facts.mentioned
    post = _envelope(extract_message(_message(FORUM_POST, "pip"), bot=BOT, channel=FORUM_POST))
    assert (post.key.chat_id, post.key.thread_id) == ("650", "710")
    assert post.place.thread_name == "Install fails"


def test_a_dm_is_one_direct_place() -> None:
    e = _envelope(extract_message(_message(DM, "/new"), bot=BOT, channel=DM))
    assert (e.key.scope, e.key.chat_id, e.key.thread_id) == ("@me", "800", None)
    assert e.facts is not None and e.facts.direct and e.place.direct
    assert e.command == "new"


def test_facts_of_bots_self_and_replies_to_the_bot() -> None:
    own = _message(GENERAL, "an answer")
    own["author"] = {"id": "900", "username": "gatewaybot", "bot": True}
    facts = _envelope(extract_message(own, bot=BOT, channel=THREAD)).facts
    assert facts is not None and facts.from_self and facts.from_bot
    reply = _message(
        GENERAL,
        "thanks",
        type=19,
        message_reference={"message_id": "999"},
        referenced_message={"id": "999", "author": {"id": "900", "username": "gatewaybot"}},
    )
    e = _envelope(extract_message(reply, bot=BOT, channel=GENERAL))
    assert e.facts is not None and e.facts.reply_to_bot and e.reply_to_id == "999"


def test_edits_and_deletions_are_annotations_never_answered() -> None:
    edited = _message(DM, "first", edited_timestamp="2026-12-07T10:01:00+00:00")
    e = _envelope(extract_message(edited, bot=BOT, channel=DM, kind=EventKind.EDIT))
    assert e.kind is EventKind.EDIT and e.trigger is Trigger.NEVER
    assert e.event_id == "edit:1001:2026-12-07T10:01:00+00:00" and e.text == "first"
    gone = {"id": "1001", "channel_id": "700", "guild_id": GUILD}
    d = _envelope(extract_message(gone, bot=BOT, channel=THREAD, kind=EventKind.DELETE))
    assert d.kind is EventKind.DELETE and d.trigger is Trigger.NEVER
    # the same place as the message it deletes: the store finds it by its key
    assert (d.key.chat_id, d.message_id) == ("600", "1001")


def test_system_messages_are_ignored_and_bad_ones_rejected() -> None:
    joined = _message(GENERAL, "", type=7)
    assert isinstance(extract_message(joined, bot=BOT, channel=GENERAL), Ignored)
    assert isinstance(
        extract_message({"id": "x", "channel_id": "600"}, bot=BOT, channel=GENERAL), Rejected
    )
    anonymous = _message(GENERAL, "hi")
    del anonymous["author"]
    assert isinstance(extract_message(anonymous, bot=BOT, channel=GENERAL), Rejected)


def test_thread_names_are_the_first_line_shortened() -> None:
    assert thread_name("<@900> hello\nmore") == "hello"
    assert thread_name("<@900>") == "Conversation"
    assert len(thread_name("x" * 300)) == 100


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "id",
                "channel_id",
                "guild_id",
                "author",
                "content",
                "timestamp",
                "edited_timestamp",
                "mentions",
                "attachments",
                "referenced_message",
                "message_reference",
                "type",
            ]
        ),
        NASTY,
        max_size=5,
    ),
    st.sampled_from([GENERAL, THREAD, DM]),
    st.sampled_from(list(EventKind)),
)
def test_extract_never_raises_on_hostile_messages(
    changes: dict[str, Any], channel: Channel, kind: EventKind
) -> None:
    message = {**_message(channel, "<@900> hello"), **changes}
    _check(
        admit(extract_message(message, bot=BOT, channel=channel, kind=kind), AnswerRules()), message
    )
