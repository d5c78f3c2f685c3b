"""Pure extraction, table-tested on the captured payloads in shared/payloads and on every
variant platforms.md §3 describes (root post, thread reply, DM, GM, own post, other bot, edit,
delete, malformed post JSON, mentions, commands)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.mattermost.extract import (
    BotIdentity,
    ExtractContext,
    decode_mentions,
    extract_post,
    parse_command,
    reaction_of,
)
from adapters.mattermost.extract import extract_event as extract_only
from gateway.core.domain import (
    Envelope,
    EventKind,
    Extracted,
    Ignored,
    Reaction,
    Rejected,
    SessionKey,
    Trigger,
)
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from testsupport.mattermost import load_payload
from testsupport.paths import PAYLOADS

SCOPE = "chat.example.com"
BOT = BotIdentity(user_id="b0tb0tb0tb0tb0tb0tb0tb0tb0", username="gatewaybot")
CTX = ExtractContext(scope=SCOPE, bot=BOT)
#: Mattermost's rules with no lists (the words its reasons use)
MM_RULES = AnswerRules(chat_word="channel", own_word="post")


def extract_event(
    frame: Any, *, ctx: ExtractContext, rules: AnswerRules = MM_RULES, **kwargs: Any
) -> Extracted:
    """The extraction, then the core's door (``admit``): what the core stores."""
    return admit(extract_only(frame, ctx=ctx, **kwargs), rules)


CHANNEL = "1waumyyd6jyczrxntuiopybygy"  # from the capture
POST = "5greg5b4w3rojmqc188znn8s7c"
ROOT = "ap8doms33tn1pj3ihjk3gmf4jy"
HUMAN = "cmr7sncacib4xfhd6yo3n4tf5e"


def posted(
    *, post: dict[str, Any] | None = None, data: dict[str, Any] | None = None, event: str = "posted"
) -> dict[str, Any]:
    """The real root-post capture with the post (a JSON string) and data patched."""
    frame = load_payload("mattermost_ws_posted_root_post.capture.json")
    decoded = json.loads(frame["data"]["post"])
    decoded.update(post or {})
    frame["data"]["post"] = json.dumps(decoded)
    frame["data"].update(data or {})
    frame["event"] = event
    return frame


def key(thread: str | None, chat: str = CHANNEL) -> SessionKey:
    return SessionKey(platform="mattermost", scope=SCOPE, chat_id=chat, thread_id=thread)


def envelope(result: object) -> Envelope:
    assert isinstance(result, Envelope), result
    return result


# --- the captured payloads, every one of them -----------------------------------------------


def test_payload_files_are_all_covered() -> None:
    names = {p.name for p in PAYLOADS.glob("mattermost_*.json")}
    assert names == {
        "mattermost_ws_posted_root_post.capture.json",
        "mattermost_ws_posted_thread_reply.FILLED.json",
        "mattermost_ws_hello.capture.json",
        "mattermost_ws_auth_ok.capture.json",
        "mattermost_ws_authentication_challenge.docs.json",
    }


def test_capture_root_post() -> None:
    env = envelope(
        extract_event(load_payload("mattermost_ws_posted_root_post.capture.json"), ctx=CTX)
    )
    assert env.key == key(POST)  # a root post starts its own thread session
    assert env.target.thread_id == POST  # the answer is threaded under it: root_id = post id
    assert env.target.reply_to_message_id == POST
    assert env.message_id == POST and env.event_id == f"post:{POST}"
    assert env.text == "message sent"
    assert env.sender.id == HUMAN and env.sender.name == "rgabriel"
    assert env.sender.is_bot is False
    assert env.kind is EventKind.MESSAGE
    assert env.trigger is Trigger.NEVER  # no mention in a channel: context only
    assert env.command is None and env.reply_to_id is None
    assert env.sent_at == datetime.fromtimestamp(1682311948645 / 1000, tz=UTC)
    assert env.metadata["team_id"] == "68ia7ywnopny8nmcdrkatmytjh"
    assert env.metadata["channel_type"] == "O"


def test_capture_thread_reply() -> None:
    env = envelope(
        extract_event(load_payload("mattermost_ws_posted_thread_reply.FILLED.json"), ctx=CTX)
    )
    assert env.key == key(ROOT)  # the thread's session, not the reply's own id
    assert env.target.thread_id == ROOT  # never the reply's own id (400 root_id.app_error)
    assert env.message_id == POST
    assert env.reply_to_id == ROOT
    assert env.trigger is Trigger.IF_FOLLOWING


def test_capture_hello_is_ignored() -> None:
    result = extract_event(load_payload("mattermost_ws_hello.capture.json"), ctx=CTX)
    assert isinstance(result, Ignored) and result.reason == "event hello"


def test_capture_auth_ok_reply_is_ignored() -> None:
    result = extract_event(load_payload("mattermost_ws_auth_ok.capture.json"), ctx=CTX)
    assert isinstance(result, Ignored)


def test_docs_authentication_challenge_is_not_a_server_event() -> None:
    # a client->server action; if a server ever echoed one it would be a dead letter
    result = extract_event(
        load_payload("mattermost_ws_authentication_challenge.docs.json"), ctx=CTX
    )
    assert isinstance(result, Rejected)


# --- variants: session key, target, trigger -------------------------------------------------

MENTION = {"mentions": json.dumps([BOT.user_id])}

CASES: list[
    tuple[str, dict[str, Any], dict[str, Any], AnswerRules, str | None, str | None, Trigger]
] = [
    # id, post patch, data patch, ctx, key thread, target thread, trigger
    ("channel root, no mention", {}, {}, MM_RULES, POST, POST, Trigger.NEVER),
    ("channel root, mentions field", {}, MENTION, MM_RULES, POST, POST, Trigger.ALWAYS),
    (
        "channel root, @name in text",
        {"message": "hey @GatewayBot, help"},
        {},
        MM_RULES,
        POST,
        POST,
        Trigger.ALWAYS,
    ),
    (
        "channel root, @name. at sentence end",
        {"message": "ask @gatewaybot."},
        {},
        MM_RULES,
        POST,
        POST,
        Trigger.ALWAYS,
    ),
    (
        "channel root, other user's mention",
        {},
        {"mentions": json.dumps(["someoneelse"])},
        MM_RULES,
        POST,
        POST,
        Trigger.NEVER,
    ),
    (
        "channel root, @gatewaybot-2 is someone else",
        {"message": "@gatewaybot-2 hi"},
        {},
        MM_RULES,
        POST,
        POST,
        Trigger.NEVER,
    ),
    (
        "channel root, e-mail is no mention",
        {"message": "mail x@gatewaybot.com"},
        {},
        MM_RULES,
        POST,
        POST,
        Trigger.NEVER,
    ),
    (
        "private channel root with mention",
        {},
        {"channel_type": "P", **MENTION},
        MM_RULES,
        POST,
        POST,
        Trigger.ALWAYS,
    ),
    ("thread reply follows", {"root_id": ROOT}, {}, MM_RULES, ROOT, ROOT, Trigger.IF_FOLLOWING),
    (
        "thread reply, require_mention",
        {"root_id": ROOT},
        {},
        replace(MM_RULES, require_mention=True),
        ROOT,
        ROOT,
        Trigger.NEVER,
    ),
    (
        "thread reply with mention, require_mention",
        {"root_id": ROOT},
        MENTION,
        replace(MM_RULES, require_mention=True),
        ROOT,
        ROOT,
        Trigger.ALWAYS,
    ),
    (
        "DM top level: one session per DM, answer at top level",
        {},
        {"channel_type": "D", "team_id": ""},
        MM_RULES,
        None,
        None,
        Trigger.ALWAYS,
    ),
    (
        "DM threaded reply: the thread",
        {"root_id": ROOT},
        {"channel_type": "D"},
        MM_RULES,
        ROOT,
        ROOT,
        Trigger.ALWAYS,
    ),
    (
        "GM top level without mention",
        {},
        {"channel_type": "G"},
        MM_RULES,
        None,
        None,
        Trigger.NEVER,
    ),
    (
        "GM top level with mention",
        {},
        {"channel_type": "G", **MENTION},
        MM_RULES,
        None,
        None,
        Trigger.ALWAYS,
    ),
    (
        "GM thread reply follows",
        {"root_id": ROOT},
        {"channel_type": "G"},
        MM_RULES,
        ROOT,
        ROOT,
        Trigger.IF_FOLLOWING,
    ),
    (
        "other bot, mentioned: context only",
        {"props": {"from_bot": "true"}},
        MENTION,
        MM_RULES,
        POST,
        POST,
        Trigger.NEVER,
    ),
    (
        "other bot in a DM: context only",
        {"props": {"from_bot": "true"}},
        {"channel_type": "D"},
        MM_RULES,
        None,
        None,
        Trigger.NEVER,
    ),
    (
        "other bot, answer_bots",
        {"props": {"from_bot": "true"}},
        MENTION,
        replace(MM_RULES, answer_bots=True),
        POST,
        POST,
        Trigger.ALWAYS,
    ),
    (
        "incoming webhook counts as a bot",
        {"props": {"from_webhook": "true"}},
        MENTION,
        MM_RULES,
        POST,
        POST,
        Trigger.NEVER,
    ),
]


@pytest.mark.parametrize(
    ("patch", "data", "rules", "thread", "target_thread", "trigger"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_routing_and_trigger(
    patch: dict[str, Any],
    data: dict[str, Any],
    rules: AnswerRules,
    thread: str | None,
    target_thread: str | None,
    trigger: Trigger,
) -> None:
    env = envelope(extract_event(posted(post=patch, data=data), ctx=CTX, rules=rules))
    assert env.key == key(thread)
    assert env.target.thread_id == target_thread
    assert env.target.chat_id == CHANNEL and env.target.scope == SCOPE
    assert env.trigger is trigger
    assert env.target.thread_id != POST or not patch.get("root_id")  # never a reply's id


def test_other_bot_is_marked() -> None:
    env = envelope(extract_event(posted(post={"props": {"from_bot": "true"}}), ctx=CTX))
    assert env.sender.is_bot is True


def test_webhook_override_username_is_the_sender_name() -> None:
    env = envelope(
        extract_event(
            posted(post={"props": {"from_webhook": "true", "override_username": "ci"}}), ctx=CTX
        )
    )
    assert env.sender.name == "ci" and env.sender.is_bot


def test_own_post_is_ignored() -> None:
    result = extract_event(posted(post={"user_id": BOT.user_id}), ctx=CTX)
    assert isinstance(result, Ignored) and result.reason == "own post"


def test_own_edit_and_delete_are_ignored() -> None:
    for event in ("post_edited", "post_deleted"):
        frame = {
            "event": event,
            "data": {
                "post": json.dumps(
                    {"id": POST, "channel_id": CHANNEL, "user_id": BOT.user_id, "message": "x"}
                )
            },
        }
        assert isinstance(extract_event(frame, ctx=CTX, channel_type_hint="O"), Ignored)


def test_system_post_is_ignored() -> None:
    result = extract_event(posted(post={"type": "system_join_channel"}), ctx=CTX)
    assert isinstance(result, Ignored)


def test_post_as_a_dict_is_accepted_too() -> None:
    frame = posted()
    frame["data"]["post"] = json.loads(frame["data"]["post"])
    assert envelope(extract_event(frame, ctx=CTX)).message_id == POST


# --- edits and deletions: annotations ---------------------------------------------------------


def edited_frame(event: str, **patch: Any) -> dict[str, Any]:
    post = json.loads(load_payload("mattermost_ws_posted_root_post.capture.json")["data"]["post"])
    post.update(patch)
    # post_edited / post_deleted carry only the post (no channel_type)
    return {
        "event": event,
        "data": {"post": json.dumps(post)},
        "broadcast": {"channel_id": CHANNEL, "omit_users": None, "team_id": "", "user_id": ""},
        "seq": 9,
    }


def test_post_edited_is_an_edit_annotation() -> None:
    frame = edited_frame(
        "post_edited",
        message="message sent (fixed)",
        edit_at=1682312000000,
        update_at=1682312000000,
    )
    env = envelope(extract_event(frame, ctx=CTX, channel_type_hint="O"))
    assert env.kind is EventKind.EDIT
    assert env.message_id == POST  # the edited message's id
    assert env.event_id == f"edit:{POST}:1682312000000"
    assert env.text == "message sent (fixed)"
    assert env.trigger is Trigger.NEVER  # an edit is never re-answered
    assert env.key == key(POST)


def test_post_edited_in_a_dm_uses_the_dm_session() -> None:
    frame = edited_frame("post_edited", edit_at=1)
    env = envelope(extract_event(frame, ctx=CTX, channel_type_hint="D"))
    assert env.key == key(None)


def test_post_deleted_is_a_delete_annotation() -> None:
    frame = edited_frame("post_deleted", delete_at=1682312000001, root_id=ROOT)
    env = envelope(extract_event(frame, ctx=CTX, channel_type_hint="O"))
    assert env.kind is EventKind.DELETE
    assert env.message_id == POST and env.event_id == f"delete:{POST}"
    assert env.text == "" and env.trigger is Trigger.NEVER
    assert env.key == key(ROOT)


# --- malformed input: a dead letter, never an exception ------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        {"event": "posted", "data": {"post": "{not json"}},
        {"event": "posted", "data": {"post": "[1, 2]"}},
        {"event": "posted", "data": {"post": json.dumps({"message": "no ids"})}},
        {"event": "posted", "data": {}},
        {"event": "posted", "data": "nope"},
        {"event": "posted"},
        {"event": "post_edited", "data": {"post": "garbage"}},
        {"data": {"post": "{}"}},
        {"event": "", "data": {}},
        {"event": "posted", "data": {"post": json.dumps({"id": POST, "channel_id": CHANNEL})}},
    ],
    ids=[
        "post not JSON",
        "post a list",
        "post without ids",
        "no post",
        "data not a dict",
        "no data",
        "edit garbage",
        "no event name",
        "empty event name",
        "post without user",
    ],
)
def test_malformed_frames_are_rejected(frame: dict[str, Any]) -> None:
    result = extract_event(frame, ctx=CTX)
    assert isinstance(result, Rejected) and result.platform == "mattermost"
    assert result.reason


def test_malformed_mentions_do_not_reject_the_post() -> None:
    env = envelope(extract_event(posted(data={"mentions": "{oops"}), ctx=CTX))
    assert env.trigger is Trigger.NEVER


@pytest.mark.parametrize(
    "event",
    [
        "typing",
        "status_change",
        "channel_viewed",
        "hello",
        "thread_updated",
        "reaction_added",
        "user_updated",
    ],
)
def test_other_events_are_ignored(event: str) -> None:
    assert isinstance(extract_event({"event": event, "data": {}, "seq": 3}, ctx=CTX), Ignored)


# --- commands ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/new", "new"),
        ("/help", "help"),
        ("  /new  ", "new"),
        ("/NEW", "new"),
        ("@gatewaybot /new", "new"),
        ("@GatewayBot: /help", "help"),
        ("/new please", "new"),
        ("/newer", None),
        ("/unknown", None),
        ("new", None),
        ("@otherbot /new", None),
        ("hello /new", None),
        ("", None),
        ("/model", "model"),
        ("@gatewaybot /model gpt-4o", "model"),
    ],
)
def test_parse_command(text: str, expected: str | None) -> None:
    assert parse_command(text, BOT) == expected


def test_command_in_a_dm() -> None:
    env = envelope(
        extract_event(posted(post={"message": " /new"}, data={"channel_type": "D"}), ctx=CTX)
    )
    assert env.command == "new" and env.trigger is Trigger.ALWAYS


def test_command_after_mention_in_a_channel() -> None:
    env = envelope(extract_event(posted(post={"message": "@gatewaybot /help"}), ctx=CTX))
    assert env.command == "help" and env.trigger is Trigger.ALWAYS


def test_command_typed_in_a_thread_is_a_command() -> None:
    """A thread follow-up (answered when the thread is engaged) carries its command: typed as
    text in a thread, ``/schedule ...`` is scheduled, not asked to the model."""
    env = envelope(
        extract_event(posted(post={"message": "/schedule list", "root_id": "r" * 26}), ctx=CTX)
    )
    assert env.command == "schedule" and env.trigger is Trigger.IF_FOLLOWING


def test_stray_command_in_a_channel_is_not_ours() -> None:
    env = envelope(extract_event(posted(post={"message": "/new"}), ctx=CTX))
    assert env.command is None and env.trigger is Trigger.NEVER


def test_other_bots_command_is_not_executed() -> None:
    env = envelope(
        extract_event(
            posted(post={"message": "@gatewaybot /new", "props": {"from_bot": "true"}}), ctx=CTX
        )
    )
    assert env.command is None


# --- REST posts (reconciliation) produce the same envelope -----------------------------------


def test_rest_post_matches_websocket_envelope() -> None:
    frame = posted(data=MENTION)
    ws_env = envelope(extract_event(frame, ctx=CTX))
    rest_post = json.loads(frame["data"]["post"])
    rest_env = envelope(
        admit(
            extract_post(
                copy.deepcopy(rest_post),
                ctx=CTX,
                channel_type="O",
                source="reconcile",
                mentions=[BOT.user_id],
            ),
            MM_RULES,
        )
    )
    assert (
        rest_env.key,
        rest_env.target,
        rest_env.message_id,
        rest_env.event_id,
        rest_env.trigger,
    ) == (ws_env.key, ws_env.target, ws_env.message_id, ws_env.event_id, ws_env.trigger)


def test_attachments_from_file_metadata() -> None:
    env = envelope(
        extract_event(
            posted(
                post={
                    "file_ids": ["f1"],
                    "metadata": {
                        "files": [
                            {"id": "f1", "name": "cat.png", "mime_type": "image/png", "size": 12}
                        ]
                    },
                }
            ),
            ctx=CTX,
        )
    )
    assert len(env.attachments) == 1
    att = env.attachments[0]
    assert (att.kind, att.name, att.mime_type, att.size) == ("image", "cat.png", "image/png", 12)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (json.dumps(["a", "b"]), ("a", "b")),
        (["a"], ("a",)),
        ("nope", ()),
        (None, ()),
        (json.dumps({"a": 1}), ()),
    ],
)
def test_decode_mentions(value: object, expected: tuple[str, ...]) -> None:
    assert decode_mentions(value) == expected


# --- reactions: feedback on the bot's replies ----------------------------------------------------


def reaction_frame(
    event: str, emoji: str, *, user: str = HUMAN, channel_in_reaction: bool = True
) -> dict[str, Any]:
    reaction: dict[str, Any] = {
        "user_id": user,
        "post_id": POST,
        "emoji_name": emoji,
        "create_at": 1,
        "update_at": 1,
        "delete_at": 0,
    }
    if channel_in_reaction:
        reaction["channel_id"] = CHANNEL
    return {
        "event": event,
        "data": {"reaction": json.dumps(reaction)},
        "broadcast": {"channel_id": CHANNEL, "omit_users": None, "team_id": "", "user_id": ""},
        "seq": 4,
    }


@pytest.mark.parametrize(
    ("event", "emoji", "value"),
    [
        ("reaction_added", "+1", 1),
        ("reaction_added", "thumbsup", 1),
        ("reaction_added", "+1_medium_skin_tone", 1),
        ("reaction_added", "-1", -1),
        ("reaction_added", "thumbsdown", -1),
        ("reaction_removed", "+1", 0),
        ("reaction_removed", "-1", 0),
    ],
)
def test_reaction_feedback(event: str, emoji: str, value: int) -> None:
    assert reaction_of(reaction_frame(event, emoji), ctx=CTX) == Reaction(
        chat_id=CHANNEL, message_id=POST, user_id=HUMAN, value=value
    )
    # older servers: the channel only in the broadcast
    assert reaction_of(reaction_frame(event, emoji, channel_in_reaction=False), ctx=CTX) is not None
    # and as a websocket event it is not a message
    assert isinstance(extract_event(reaction_frame(event, emoji), ctx=CTX), Ignored)


@pytest.mark.parametrize(
    "frame",
    [
        reaction_frame("reaction_added", "tada"),
        reaction_frame("reaction_added", "+1", user=BOT.user_id),
        {"event": "reaction_added", "data": {"reaction": "{broken"}},
        {"event": "reaction_added", "data": {}},
        {"event": "posted", "data": {"reaction": "{}"}},
    ],
    ids=["other emoji", "own reaction", "bad JSON", "no reaction", "not a reaction event"],
)
def test_reactions_that_are_not_feedback(frame: dict[str, Any]) -> None:
    assert reaction_of(frame, ctx=CTX) is None


def test_a_stop_reaction_asks_to_stop_and_its_removal_is_nothing() -> None:
    """⏹ on the bot's answer stops it being written (not feedback); taking it back does nothing."""
    assert reaction_of(reaction_frame("reaction_added", "black_square_for_stop"), ctx=CTX) == (
        Reaction(chat_id=CHANNEL, message_id=POST, user_id=HUMAN, value=0, stop=True)
    )
    assert reaction_of(reaction_frame("reaction_removed", "black_square_for_stop"), ctx=CTX) is None
