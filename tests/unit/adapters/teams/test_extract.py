"""Teams activities -> envelopes: the place (channel reply chain, chat), the facts, the text the
model sees; presses and reactions; conversation ids kept safe inside session keys."""

from __future__ import annotations

from typing import Any

from adapters.teams.extract import (
    card_press,
    extract_activity,
    parse_activity,
    reaction_of,
    thread_conversation,
)
from adapters.teams.markdown import to_teams
from gateway.core.domain import Envelope, EventKind, Ignored, SessionKey
from testsupport.fakes.teams import ANN, TENANT, FakeTeams

CHANNEL = "19:abc@thread.tacv2"


def activity(fake: FakeTeams, **fields: Any) -> dict[str, Any]:
    base = fake._activity("message", fake.channel, person=ANN, activity_id="100", root="100")
    base.update(
        text="<at>Gateway</at> hi <at>Bob</at> &amp; you",
        entities=[
            {
                "type": "mention",
                "mentioned": {"id": fake.bot_id, "name": "Gateway"},
                "text": "<at>Gateway</at>",
            },
            {
                "type": "mention",
                "mentioned": {"id": "29:bob", "name": "Bob"},
                "text": "<at>Bob</at>",
            },
        ],
    )
    base.update(fields)
    return base


def test_a_channel_post_is_its_own_thread_and_a_reply_joins_it(fake: FakeTeams) -> None:
    root = extract_activity(parse_activity(activity(fake)))
    assert isinstance(root, Envelope)
    place = fake.channel.id
    assert root.key == SessionKey(platform="teams", scope=TENANT, chat_id=place, thread_id="100")
    assert root.text == "hi @Bob & you"
    assert root.facts is not None and root.facts.mentioned and not root.facts.thread_reply
    assert root.target.extra["service_url"] == fake.service_url
    conversation = dict(activity(fake)["conversation"], id=f"{fake.channel.id};messageid=100")
    reply = extract_activity(
        parse_activity(
            activity(fake, id="101", conversation=conversation, text="more", entities=[])
        )
    )
    assert isinstance(reply, Envelope) and reply.key == root.key
    assert reply.facts is not None and reply.facts.thread_reply and not reply.facts.mentioned
    assert thread_conversation(reply.target.chat_id, reply.target.thread_id) == (
        f"{fake.channel.id};messageid=100"
    )


def test_chats_have_no_threads_and_a_personal_chat_is_direct(fake: FakeTeams) -> None:
    chat = fake.personal_chat()
    a = fake._activity("message", chat, person=ANN)
    a["text"] = "hello"
    got = extract_activity(parse_activity(a))
    assert isinstance(got, Envelope) and got.key.thread_id is None
    assert got.facts is not None and got.facts.direct
    assert got.key.chat_id == chat.id and ":" in chat.id
    assert str(got.key) == f"teams:{TENANT}:{chat.id.replace(':', '%3A')}:-"
    assert SessionKey.parse(str(got.key)) == got.key  # the id's ':' do not break the key


def test_edits_and_deletions_are_events_of_their_own_never_answered(fake: FakeTeams) -> None:
    edit = extract_activity(parse_activity(activity(fake, type="messageUpdate")))
    delete = extract_activity(parse_activity(activity(fake, type="messageDelete")))
    assert isinstance(edit, Envelope) and edit.kind is EventKind.EDIT
    assert edit.event_id is not None and edit.event_id.startswith("edit:100:")
    assert isinstance(delete, Envelope) and delete.kind is EventKind.DELETE
    assert delete.text == "" and delete.event_id == "delete:100"
    assert isinstance(extract_activity(parse_activity(activity(fake, type="typing"))), Ignored)


def test_a_card_press_and_feedback(fake: FakeTeams) -> None:
    press = parse_activity(
        activity(
            fake,
            type="invoke",
            name="adaptiveCard/action",
            replyToId="card-1",
            value={
                "action": {"type": "Action.Execute", "verb": "deny", "data": {"approval_id": "ap"}}
            },
        )
    )
    found = card_press(press)
    assert found is not None and (found.approval_id, found.approve) == ("ap", False)
    assert (found.person, found.thread_id, found.message_id) == (ANN.aad, "100", "card-1")
    feedback = parse_activity(
        activity(
            fake,
            type="invoke",
            name="message/submitAction",
            replyToId="answer-1",
            value={"actionName": "feedback", "actionValue": {"reaction": "dislike"}},
        )
    )
    reaction = reaction_of(feedback)
    assert reaction is not None and (reaction.message_id, reaction.value) == ("answer-1", -1)


def test_markdown_as_teams_renders_it() -> None:
    text = (
        "# Title\n\nSome **bold**.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "![logo](https://x/l.png)\n\n```\n# not a heading\n```"
    )
    assert to_teams(text) == (
        "**Title**\n\nSome **bold**.\n\n```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\n"
        "[logo](https://x/l.png)\n\n```\n# not a heading\n```"
    )
