"""Pure extraction, table-tested on the real payloads in shared/payloads and on every variant
platforms.md §2 describes (DMs, threads, mentions, bots, edits, deletes, hidden notifications)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from adapters.slack.extract import (
    BotIdentity,
    backfill_root,
    extract_event,
    extract_history,
    route,
)
from gateway.core.domain import (
    Envelope,
    EventKind,
    Extracted,
    Ignored,
    Rejected,
    SessionKey,
    Trigger,
)
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from testsupport.slack import load_payload

ME = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")
DEFAULT = AnswerRules()


def wrap(event: dict[str, Any], *, team_id: str = "T1", event_id: str = "Ev1") -> dict[str, Any]:
    return {"type": "event_callback", "team_id": team_id, "event_id": event_id, "event": event}


def msg(**fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "message",
        "channel": "C1",
        "channel_type": "channel",
        "user": "UHUMAN",
        "text": "hello",
        "ts": "1700000000.000100",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def key(thread: str | None, *, chat: str = "C1", scope: str = "T1") -> SessionKey:
    return SessionKey(platform="slack", scope=scope, chat_id=chat, thread_id=thread)


# --- the real payloads ------------------------------------------------------------------------


@dataclass
class Expect:
    kind: type[Envelope] | type[Ignored] | type[Rejected]
    key: SessionKey | None = None
    target_thread: str | None = None
    message_id: str | None = None
    event_id: str | None = None
    trigger: Trigger | None = None
    text: str | None = None
    sender: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


REAL_PAYLOADS = [
    pytest.param(
        "slack_event_app_mention.docs.json",
        BotIdentity(user_id="U0LAN0Z89"),
        Expect(
            Envelope,
            key=key("1515449522.000016", chat="C123ABC456", scope="T123ABC456"),
            target_thread="1515449522.000016",  # a top-level mention opens a thread under itself
            message_id="1515449522.000016",
            event_id="Ev123ABC456",
            trigger=Trigger.ALWAYS,
            text="is it everything a river should be?",
            sender="U061F7AUR",
        ),
        id="app_mention-docs",
    ),
    pytest.param(
        "slack_event_message_replied.docs.json",
        ME,
        Expect(Ignored, event_id="Ev123ABC456"),
        id="message_replied-docs",
    ),
    pytest.param(
        "slack_event_thread_reply.bolt_test.json",
        BotIdentity(user_id="W111"),
        Expect(
            Envelope,
            key=key("1726133698.626339", chat="C111", scope="T111"),
            target_thread="1726133698.626339",  # the root, never the reply's own ts
            message_id="1726133700.887259",
            event_id="Ev111",
            trigger=Trigger.IF_FOLLOWING,
            text="When Slack was released?",
            sender="W222",
            extra={"reply_to_id": "1726133698.626339"},
        ),
        id="thread_reply-bolt",
    ),
    pytest.param(
        "slack_event_thread_broadcast.bolt_test.json",
        BotIdentity(user_id="W111"),
        Expect(
            Envelope,
            key=key("1633663824.000500", chat="C111", scope="T111"),
            target_thread="1633663824.000500",
            message_id="1633670813.007500",
            event_id="Ev111",
            trigger=Trigger.IF_FOLLOWING,
            text="Hi there!",
            sender="U111",
        ),
        id="thread_broadcast-bolt",
    ),
    pytest.param(
        "slack_url_verification.docs.json",
        ME,
        Expect(Ignored),
        id="url_verification-docs",
    ),
]


@pytest.mark.parametrize(("name", "me", "expect"), REAL_PAYLOADS)
def test_real_payloads_normalize_to_expected_keys(
    name: str, me: BotIdentity, expect: Expect
) -> None:
    result = admit(extract_event(load_payload(name), me=me), DEFAULT)
    assert isinstance(result, expect.kind), result
    if expect.event_id is not None:
        assert result.event_id == expect.event_id
    if isinstance(result, Envelope):
        assert result.key == expect.key
        assert result.target.thread_id == expect.target_thread
        assert result.target.chat_id == result.key.chat_id
        assert result.target.scope == result.key.scope
        assert result.message_id == expect.message_id
        assert result.trigger is expect.trigger
        assert result.text == expect.text
        assert result.sender.id == expect.sender
        for attr, value in expect.extra.items():
            assert getattr(result, attr) == value


def test_socket_mode_envelope_payload_is_the_same_event_callback() -> None:
    envelope = load_payload("slack_socket_mode_envelope_app_mention.sdk_test.json")
    result = admit(extract_event(envelope["payload"], me=BotIdentity(user_id="U111")), DEFAULT)
    assert isinstance(result, Envelope)
    assert result.key == key("1610241741.000200", chat="C111", scope="T111")
    assert result.event_id == "Ev111"
    assert result.trigger is Trigger.ALWAYS
    assert result.text == ""  # only the mention: nothing else was said


def test_message_replied_without_subtype_is_not_routed_to_its_own_ts() -> None:
    """Over the Events API message_replied arrives WITHOUT subtype (platforms.md §2.5)."""
    payload = load_payload("slack_event_message_replied.docs.json")
    del payload["event"]["subtype"]
    result = admit(extract_event(payload, me=ME), DEFAULT)
    assert isinstance(result, Ignored)
    # and even without the hidden flag, a message with no author is never a conversation
    del payload["event"]["hidden"]
    assert isinstance(admit(extract_event(payload, me=ME), DEFAULT), Ignored)


def test_app_mention_and_message_of_one_post_have_the_same_dedupe_ids() -> None:
    text = "<@UBOT> what is up"
    as_mention = wrap(
        {
            "type": "app_mention",
            "channel": "C1",
            "user": "U2",
            "text": text,
            "ts": "1700000000.000200",
        },
        event_id="EvA",
    )
    as_message = wrap(msg(text=text, user="U2", ts="1700000000.000200"), event_id="EvB")
    a = admit(extract_event(as_mention, me=ME), DEFAULT)
    b = admit(extract_event(as_message, me=ME), DEFAULT)
    assert isinstance(a, Envelope) and isinstance(b, Envelope)
    assert (a.key, a.message_id, a.target) == (b.key, b.message_id, b.target)
    assert a.event_id != b.event_id
    assert a.trigger is b.trigger is Trigger.ALWAYS
    assert a.text == b.text == "what is up"


# --- variants ---------------------------------------------------------------------------------

TS = "1700000000.000100"
ROOT = "1699999999.000001"

# fmt: off  (a table reads better one case per two lines)
VARIANTS: list[Any] = [
    # (id, event, policy, me, expected type, key thread, target thread, trigger, extra checks)
    (
        "dm-top-level",
        msg(channel="D1", channel_type="im"),
        DEFAULT,
        Envelope,
        key(None, chat="D1"),
        None,
        Trigger.ALWAYS,
        {},
    ),
    (
        "dm-thread-reply",
        msg(channel="D1", channel_type="im", thread_ts=ROOT),
        DEFAULT,
        Envelope,
        key(ROOT, chat="D1"),
        ROOT,
        Trigger.ALWAYS,
        {},
    ),
    (
        "dm-without-channel_type-by-id",
        msg(channel="D1", channel_type=None),
        DEFAULT,
        Envelope,
        key(None, chat="D1"),
        None,
        Trigger.ALWAYS,
        {},
    ),
    ("channel-top-level-no-mention", msg(), DEFAULT, Envelope, key(TS), TS, Trigger.NEVER, {}),
    (
        "channel-top-level-mention-as-message",
        msg(text="<@UBOT> hi"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"text": "hi"},
    ),
    (
        "mention-with-label",
        msg(text="<@UBOT|gatewaybot>: hi"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"text": "hi"},
    ),
    (
        "mention-mid-text-keeps-text",
        msg(text="ask <@UBOT> please"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"text": "ask <@UBOT> please"},
    ),
    (
        "mention-of-someone-else",
        msg(text="<@UOTHER> hi"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.NEVER,
        {"text": "<@UOTHER> hi"},
    ),
    (
        "thread-follow-up",
        msg(thread_ts=ROOT),
        DEFAULT,
        Envelope,
        key(ROOT),
        ROOT,
        Trigger.IF_FOLLOWING,
        {"reply_to_id": ROOT},
    ),
    (
        "thread-follow-up-require-mention",
        msg(thread_ts=ROOT),
        AnswerRules(require_mention=True),
        Envelope,
        key(ROOT),
        ROOT,
        Trigger.NEVER,
        {},
    ),
    (
        "thread-mention-require-mention",
        msg(thread_ts=ROOT, text="<@UBOT> go"),
        AnswerRules(require_mention=True),
        Envelope,
        key(ROOT),
        ROOT,
        Trigger.ALWAYS,
        {},
    ),
    (
        "app_mention-in-thread",
        {
            "type": "app_mention",
            "channel": "C1",
            "user": "U2",
            "text": "<@UBOT> sum up",
            "ts": TS,
            "thread_ts": ROOT,
        },
        DEFAULT,
        Envelope,
        key(ROOT),
        ROOT,
        Trigger.ALWAYS,
        {"text": "sum up"},
    ),
    (
        "thread-root-itself",
        msg(thread_ts=TS),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.NEVER,
        {"reply_to_id": None},
    ),
    (
        "private-channel-group",
        msg(channel="G1", channel_type="group", text="<@UBOT> x"),
        DEFAULT,
        Envelope,
        key(TS, chat="G1"),
        TS,
        Trigger.ALWAYS,
        {},
    ),
    (
        "mpim-needs-mention",
        msg(channel="G2", channel_type="mpim"),
        DEFAULT,
        Envelope,
        key(TS, chat="G2"),
        TS,
        Trigger.NEVER,
        {},
    ),
    (
        "thread_broadcast",
        msg(subtype="thread_broadcast", thread_ts=ROOT),
        DEFAULT,
        Envelope,
        key(ROOT),
        ROOT,
        Trigger.IF_FOLLOWING,
        {},
    ),
    (
        "file_share",
        msg(
            subtype="file_share",
            text="<@UBOT> look",
            files=[
                {
                    "id": "F1",
                    "name": "a.png",
                    "mimetype": "image/png",
                    "size": 12,
                    "url_private": "https://files.slack.test/a.png",
                }
            ],
        ),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"text": "look"},
    ),
    (
        "command-new-after-mention",
        msg(text="<@UBOT> /new"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"command": "new"},
    ),
    (
        "command-help-in-dm",
        msg(channel="D1", channel_type="im", text="/help"),
        DEFAULT,
        Envelope,
        key(None, chat="D1"),
        None,
        Trigger.ALWAYS,
        {"command": "help"},
    ),
    (
        "model-command-with-argument",
        msg(text="<@UBOT> /model gpt-4o"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"command": "model", "text": "/model gpt-4o"},
    ),
    (
        "command-word-without-slash-is-text",
        msg(text="<@UBOT> new"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"command": None},
    ),
    (
        # answered if the thread is engaged: the command counts, as on every surface
        "command-in-unaddressed-follow-up",
        msg(thread_ts=ROOT, text="/new"),
        DEFAULT,
        Envelope,
        key(ROOT),
        ROOT,
        Trigger.IF_FOLLOWING,
        {"command": "new"},
    ),
    (
        "other-bot-by-bot_id",
        msg(bot_id="BOTHER", user="UOTHERBOT", text="<@UBOT> hi"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.NEVER,
        {"sender_is_bot": True},
    ),
    (
        "other-bot-answered-when-allowed",
        msg(bot_id="BOTHER", user="UOTHERBOT", text="<@UBOT> hi"),
        AnswerRules(answer_bots=True),
        Envelope,
        key(TS),
        TS,
        Trigger.ALWAYS,
        {"sender_is_bot": True},
    ),
    (
        "legacy-bot_message-subtype",
        msg(subtype="bot_message", user=None, bot_id="BOTHER", username="legacy"),
        DEFAULT,
        Envelope,
        key(TS),
        TS,
        Trigger.NEVER,
        {"sender_is_bot": True, "sender_id": "BOTHER"},
    ),
    ("own-message-by-user", msg(user="UBOT"), DEFAULT, Ignored, None, None, None, {}),
    (
        "own-message-by-bot_id",
        msg(user=None, bot_id="BBOT", subtype="bot_message"),
        DEFAULT,
        Ignored,
        None,
        None,
        None,
        {},
    ),
    (
        "own-app_mention-echo",
        {
            "type": "app_mention",
            "channel": "C1",
            "user": "UBOT",
            "bot_id": "BBOT",
            "text": "<@UBOT>",
            "ts": TS,
        },
        DEFAULT,
        Ignored,
        None,
        None,
        None,
        {},
    ),
    (
        "channel_join",
        msg(subtype="channel_join", text="<@UHUMAN> has joined"),
        DEFAULT,
        Ignored,
        None,
        None,
        None,
        {},
    ),
    ("channel_leave", msg(subtype="channel_leave"), DEFAULT, Ignored, None, None, None, {}),
    ("channel_topic", msg(subtype="channel_topic"), DEFAULT, Ignored, None, None, None, {}),
    ("hidden-unknown", msg(hidden=True), DEFAULT, Ignored, None, None, None, {}),
    (
        "other-event-type",
        {"type": "reaction_added", "user": "U1", "reaction": "+1"},
        DEFAULT,
        Ignored,
        None,
        None,
        None,
        {},
    ),
    ("missing-ts", msg(ts=None), DEFAULT, Rejected, None, None, None, {}),
    ("garbage-ts", msg(ts="yesterday"), DEFAULT, Rejected, None, None, None, {}),
    ("missing-channel", msg(channel=None), DEFAULT, Rejected, None, None, None, {}),
]
# fmt: on


@pytest.mark.parametrize(
    ("event", "policy", "kind", "exp_key", "target_thread", "trigger", "checks"),
    [pytest.param(*v[1:], id=v[0]) for v in VARIANTS],
)
def test_message_variants(
    event: dict[str, Any],
    policy: AnswerRules,
    kind: type[Extracted],
    exp_key: SessionKey | None,
    target_thread: str | None,
    trigger: Trigger | None,
    checks: dict[str, Any],
) -> None:
    result = admit(extract_event(wrap(event), me=ME), policy)
    assert isinstance(result, kind), result
    assert result.event_id == "Ev1"
    if not isinstance(result, Envelope):
        return
    assert result.key == exp_key
    assert result.target.thread_id == target_thread
    assert result.trigger is trigger
    assert result.kind is EventKind.MESSAGE
    assert result.message_id == event["ts"]
    for name, value in checks.items():
        if name == "sender_is_bot":
            assert result.sender.is_bot is value
        elif name == "sender_id":
            assert result.sender.id == value
        else:
            assert getattr(result, name) == value


def test_file_share_keeps_attachment_metadata() -> None:
    event = VARIANTS[[v[0] for v in VARIANTS].index("file_share")][1]
    result = admit(extract_event(wrap(event), me=ME), DEFAULT)
    assert isinstance(result, Envelope)
    (attachment,) = result.attachments
    assert (attachment.kind, attachment.name, attachment.mime_type, attachment.size) == (
        "image",
        "a.png",
        "image/png",
        12,
    )


def test_message_changed_is_an_edit_of_the_inner_message() -> None:
    event: dict[str, Any] = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "channel": "C1",
        "channel_type": "channel",
        "ts": "1700000000.000900",
        "message": {
            "type": "message",
            "user": "U2",
            "text": "new words",
            "ts": TS,
            "thread_ts": ROOT,
        },
        "previous_message": {
            "type": "message",
            "user": "U2",
            "text": "old words",
            "ts": TS,
            "thread_ts": ROOT,
        },
    }
    result = admit(extract_event(wrap(event), me=ME), DEFAULT)
    assert isinstance(result, Envelope)
    assert result.kind is EventKind.EDIT
    assert result.message_id == TS  # the edited message, not the notification's ts
    assert result.key == key(ROOT)
    assert result.text == "new words"
    assert result.trigger is Trigger.NEVER

    unchanged = copy.deepcopy(event)
    unchanged["message"]["text"] = "old words"  # an unfurl or reply-count update
    assert isinstance(admit(extract_event(wrap(unchanged), me=ME), DEFAULT), Ignored)

    own = copy.deepcopy(event)
    own["message"]["user"] = "UBOT"
    assert isinstance(admit(extract_event(wrap(own), me=ME), DEFAULT), Ignored)


def test_message_deleted_is_a_delete_of_deleted_ts() -> None:
    event = {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "channel": "D1",
        "channel_type": "im",
        "ts": "1700000000.000900",
        "deleted_ts": TS,
        "previous_message": {"type": "message", "user": "U2", "text": "oops", "ts": TS},
    }
    result = admit(extract_event(wrap(event), me=ME), DEFAULT)
    assert isinstance(result, Envelope)
    assert result.kind is EventKind.DELETE
    assert result.message_id == TS
    assert result.key == key(None, chat="D1")
    assert result.trigger is Trigger.NEVER


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param([1, 2], id="not-an-object"),
        pytest.param({"type": "event_callback", "team_id": "T1"}, id="no-event"),
        pytest.param({"type": "event_callback", "event": msg()}, id="no-team"),
        pytest.param(
            wrap({"type": "message", "subtype": "message_changed", "channel": "C1"}),
            id="edit-without-message",
        ),
    ],
)
def test_unusable_payloads_are_rejected(payload: object) -> None:
    assert isinstance(admit(extract_event(payload, me=ME), DEFAULT), Rejected)


def test_other_envelope_types_are_ignored() -> None:
    result = admit(extract_event({"type": "app_rate_limited", "team_id": "T1"}, me=ME), DEFAULT)
    assert isinstance(result, Ignored)


def test_route_is_the_one_rule() -> None:
    k, t = route(team_id="T", channel="C", ts="2.0", thread_ts="1.0", is_dm=False)
    assert (k.thread_id, t.thread_id, t.reply_to_message_id) == ("1.0", "1.0", "2.0")
    k, t = route(team_id="T", channel="C", ts="2.0", thread_ts=None, is_dm=False)
    assert (k.thread_id, t.thread_id) == ("2.0", "2.0")
    k, t = route(team_id="T", channel="D", ts="2.0", thread_ts=None, is_dm=True)
    assert (k.thread_id, t.thread_id) == (None, None)
    k, t = route(team_id="T", channel="D", ts="2.0", thread_ts="1.0", is_dm=True)
    assert (k.thread_id, t.thread_id) == ("1.0", "1.0")


def test_same_channel_id_in_two_workspaces_is_two_sessions() -> None:
    a = admit(extract_event(wrap(msg(text="<@UBOT> a"), team_id="TA"), me=ME), DEFAULT)
    b = admit(extract_event(wrap(msg(text="<@UBOT> a"), team_id="TB"), me=ME), DEFAULT)
    assert isinstance(a, Envelope) and isinstance(b, Envelope)
    assert a.key != b.key
    assert (a.target.scope, b.target.scope) == ("TA", "TB")


# --- backfill helpers -------------------------------------------------------------------------


def test_backfill_root_only_for_an_addressed_reply() -> None:
    mention_in_thread = admit(
        extract_event(wrap(msg(thread_ts=ROOT, text="<@UBOT> catch up")), me=ME), DEFAULT
    )
    top_mention = admit(extract_event(wrap(msg(text="<@UBOT> hi")), me=ME), DEFAULT)
    follow_up = admit(extract_event(wrap(msg(thread_ts=ROOT)), me=ME), DEFAULT)
    dm_top = admit(extract_event(wrap(msg(channel="D1", channel_type="im")), me=ME), DEFAULT)
    assert isinstance(mention_in_thread, Envelope)
    assert backfill_root(mention_in_thread) == ROOT
    for env in (top_mention, follow_up, dm_top):
        assert isinstance(env, Envelope)
        assert backfill_root(env) is None


def test_history_messages_become_backfill_context() -> None:
    root = {"type": "message", "user": "U1", "text": "root", "ts": ROOT, "thread_ts": ROOT}
    reply = {"type": "message", "user": "U2", "text": "r1", "ts": TS, "thread_ts": ROOT}
    own = {
        "type": "message",
        "user": "UBOT",
        "bot_id": "BBOT",
        "text": "me",
        "ts": "1.5",
        "thread_ts": ROOT,
    }
    joined = {"type": "message", "subtype": "channel_join", "user": "U3", "ts": "1.6"}
    out = [
        extract_history(m, team_id="T1", channel="C1", is_dm=False, me=ME)
        for m in (root, reply, own, joined)
    ]
    env_root, env_reply = out[0], out[1]
    assert isinstance(env_root, Envelope) and isinstance(env_reply, Envelope)
    for env, ts in ((env_root, ROOT), (env_reply, TS)):
        assert env.backfill is True
        assert env.trigger is Trigger.NEVER
        assert env.event_id is None
        assert env.message_id == ts
        assert env.key == key(ROOT)
    assert isinstance(out[2], Ignored) and isinstance(out[3], Ignored)


def test_a_subtype_that_is_not_a_string_is_ignored_not_a_crash() -> None:
    # found by the fuzzer: a list subtype was unhashable in the subtype lookup
    result = admit(extract_event(wrap(msg(subtype=["message_changed"])), me=ME), DEFAULT)
    assert isinstance(result, Ignored) and "subtype" in result.reason
