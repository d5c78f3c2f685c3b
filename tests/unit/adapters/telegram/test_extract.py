"""Table tests of the pure extraction on the real payloads in shared/payloads and on every
variant platforms.md §0-§1 describes: where each message lives (SessionKey), where its
answer goes (ReplyTarget), and whether it is answered (Trigger)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from adapters.telegram.extract import (
    BotIdentity,
    extract_update,
)
from adapters.telegram.settings import TelegramSettings
from gateway.core.domain import Envelope, EventKind, Ignored, Rejected, SessionKey, Trigger
from gateway.core.settings import Settings
from gateway.inbound.ingress import admit
from gateway.inbound.policy import AnswerRules
from testsupport.answering import telegram_rules
from testsupport.paths import PAYLOADS
from testsupport.telegram import load_payload

BOT = BotIdentity(id=5550001, username="GatewayTestBot")
POLICY = AnswerRules()


def rules(**settings: Any) -> AnswerRules:
    """The answer rules the adapter builds from these settings (the TELEGRAM_* shorthands)."""
    core = Settings(_env_file=None, **settings)  # type: ignore[call-arg]
    return telegram_rules(core.surface(TelegramSettings), core)


FORUM_ID = -1001812257489
NONFORUM_ID = -1002222000284


def extract(update: dict[str, Any], *, bot: BotIdentity = BOT, policy: AnswerRules = POLICY) -> Any:
    return admit(extract_update(update, bot=bot), policy)


def envelope(update: dict[str, Any], **kwargs: Any) -> Envelope:
    result = extract(update, **kwargs)
    assert isinstance(result, Envelope), result
    return result


def key(chat_id: int, thread: str | None = None, scope: str = "bot") -> SessionKey:
    return SessionKey(platform="telegram", scope=scope, chat_id=str(chat_id), thread_id=thread)


def topic_message() -> dict[str, Any]:
    return load_payload("telegram_update_forum_topic_message.json", update_id=900)


def general_message() -> dict[str, Any]:
    return load_payload("telegram_update_general_topic_message.DERIVED.json", update_id=901)


def nonforum_reply() -> dict[str, Any]:
    return load_payload("telegram_update_nonforum_supergroup_reply.PARTIAL.json")


def private_message(text: str = "hi", **extra: Any) -> dict[str, Any]:
    user = {"id": 208432445, "is_bot": False, "first_name": "Arbi", "username": "arbi"}
    message = {
        "message_id": 7,
        "from": user,
        "chat": {"id": 208432445, "type": "private", "first_name": "Arbi"},
        "date": 1693533691,
        "text": text,
        **extra,
    }
    return {"update_id": 902, "message": message}


def with_text(
    update: dict[str, Any],
    text: str,
    entities: list[dict[str, Any]] | None = None,
    kind: str = "message",
) -> dict[str, Any]:
    update = copy.deepcopy(update)
    message = update[kind]
    message["text"] = text
    if entities is not None:
        message["entities"] = entities
    else:
        message.pop("entities", None)
    return update


def mention(text: str, handle: str) -> list[dict[str, Any]]:
    start = text.index(handle)
    offset = len(text[:start].encode("utf-16-le")) // 2
    return [{"type": "mention", "offset": offset, "length": len(handle)}]


def command_entities(text: str) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]


# --- the real payloads ---------------------------------------------------------------------


def test_payload_files_exist() -> None:
    # CI keeps shared/ beside the checkout; a missing file must fail, not skip
    assert (PAYLOADS / "telegram_update_forum_topic_message.json").is_file()


def test_forum_topic_message_is_its_topic_session() -> None:
    env = envelope(topic_message())
    assert env.key == key(FORUM_ID, "23")
    assert env.target.thread_id == "23"
    assert env.target.chat_id == str(FORUM_ID)
    assert env.target.reply_to_message_id == "115"
    assert env.target.extra == {}
    assert env.message_id == "115"
    assert env.event_id == "900"
    assert env.text == "Tes"
    assert env.sender.id == "208432445" and env.sender.name == "Arbi Syarifudin"
    assert not env.sender.is_bot
    # reply_to_message is the forum_topic_created service message, not a user reply
    assert env.reply_to_id is None
    # a group message without mention/reply/command is context only
    assert env.trigger is Trigger.NEVER
    assert env.kind is EventKind.MESSAGE
    assert env.sent_at == datetime.fromtimestamp(1693533691, tz=UTC)


def test_forum_topic_reply_to_user_message() -> None:
    env = envelope(load_payload("telegram_update_forum_topic_reply_to_user_message.json"))
    assert env.key == key(FORUM_ID, "107")
    assert env.target.thread_id == "107"
    assert env.target.reply_to_message_id == "122"
    assert env.reply_to_id == "109"
    assert env.trigger is Trigger.NEVER


def test_general_topic_message_has_no_thread() -> None:
    env = envelope(general_message())
    assert env.key == key(FORUM_ID, None)
    assert env.target.thread_id is None
    assert env.target.reply_to_message_id == "115"


def test_nonforum_reply_chain_id_is_not_a_thread() -> None:
    update = nonforum_reply()
    assert update["message"]["message_thread_id"] == 111  # the trap this test is about
    env = envelope(update)
    assert env.key == key(NONFORUM_ID, None)
    assert env.target.thread_id is None
    assert env.reply_to_id == "111"
    assert env.event_id == "857192578"
    # the captured message has no text (PARTIAL): stored as context, nothing to answer
    assert env.text == ""
    assert env.metadata["content"] == "unknown"
    assert env.trigger is Trigger.NEVER


def test_nonforum_reply_to_our_bot_is_answered() -> None:
    debug_bot = BotIdentity(id=7490005555, username="debug_log_bot")
    env = envelope(with_text(nonforum_reply(), "what does this mean?"), bot=debug_bot)
    assert env.trigger is Trigger.ALWAYS
    assert env.target.thread_id is None
    assert env.target.reply_to_message_id == "112"


# --- General, reply chains, private chats, topics ------------------------------------------


def test_reply_inside_general_carries_a_chain_id_that_is_not_a_thread() -> None:
    update = general_message()
    message = update["message"]
    message["message_thread_id"] = 99  # tdlib/telegram-bot-api#447: root of the chain
    message["reply_to_message"] = {
        "message_id": 99,
        "from": {"id": 1, "is_bot": False, "first_name": "B"},
        "chat": message["chat"],
        "date": 1693533600,
        "text": "root",
    }
    env = envelope(update)
    assert env.key == key(FORUM_ID, None)
    assert env.target.thread_id is None
    assert env.reply_to_id == "99"


@pytest.mark.parametrize("thread", [1, 99])
def test_thread_id_without_is_topic_message_never_counts(thread: int) -> None:
    update = general_message()
    update["message"]["message_thread_id"] = thread
    env = envelope(update)
    assert env.key.thread_id is None
    assert env.target.thread_id is None


def test_is_topic_message_false_does_not_count() -> None:
    update = topic_message()
    update["message"]["is_topic_message"] = False
    assert envelope(update).key.thread_id is None


def test_private_chat_is_one_session_and_always_answered() -> None:
    env = envelope(private_message())
    assert env.key == key(208432445, None)
    assert env.target.thread_id is None
    assert env.trigger is Trigger.ALWAYS
    assert env.metadata["chat_type"] == "private"


def test_private_chat_topic_is_its_own_session() -> None:
    env = envelope(private_message(message_thread_id=5, is_topic_message=True))
    assert env.key == key(208432445, "5")
    assert env.target.thread_id == "5"
    assert env.trigger is Trigger.ALWAYS


def test_business_message_is_scoped_by_its_connection() -> None:
    update = private_message()
    message = update.pop("message")
    message["business_connection_id"] = "bc-42"
    update["business_message"] = message
    env = envelope(update)
    assert env.key == key(208432445, None, scope="bc-42")
    assert env.target.scope == "bc-42"
    assert env.target.extra == {"business_connection_id": "bc-42"}
    assert env.trigger is Trigger.ALWAYS


def test_channel_direct_messages_topic() -> None:
    update = general_message()
    message = update["message"]
    message["chat"] = {
        "id": -1003,
        "type": "supergroup",
        "title": "DMs",
        "is_direct_messages": True,
    }
    message["direct_messages_topic"] = {"topic_id": 77, "user": message["from"]}
    env = envelope(update)
    assert env.key == key(-1003, "77")
    # sent as direct_messages_topic_id, never as message_thread_id
    assert env.target.thread_id is None
    assert env.target.extra == {"direct_messages_topic_id": "77"}


# --- edits, channels, service messages, unknown updates, bad input ------------------------


def test_edited_message_is_an_edit_never_answered() -> None:
    update = with_text(
        topic_message(),
        "Tes (edited) @GatewayTestBot",
        mention("Tes (edited) @GatewayTestBot", "@GatewayTestBot"),
    )
    update["edited_message"] = update.pop("message")
    update["edited_message"]["edit_date"] = 1693533999
    env = envelope(update)
    assert env.kind is EventKind.EDIT
    assert env.message_id == "115"
    assert env.text == "Tes (edited) @GatewayTestBot"
    assert env.key == key(FORUM_ID, "23")
    assert env.trigger is Trigger.NEVER
    assert env.sent_at == datetime.fromtimestamp(1693533999, tz=UTC)


def test_edited_command_is_not_a_command() -> None:
    update = with_text(private_message(), "/new", command_entities("/new"))
    update["edited_message"] = update.pop("message")
    env = envelope(update)
    assert env.kind is EventKind.EDIT and env.command is None
    assert env.trigger is Trigger.NEVER


def test_edited_business_message() -> None:
    update = private_message("changed")
    message = update.pop("message")
    message["business_connection_id"] = "bc-42"
    update["edited_business_message"] = message
    env = envelope(update)
    assert env.kind is EventKind.EDIT and env.key.scope == "bc-42"


@pytest.mark.parametrize("kind", ["channel_post", "edited_channel_post"])
def test_channel_posts_are_ignored(kind: str) -> None:
    update = {
        "update_id": 5,
        kind: {
            "message_id": 3,
            "sender_chat": {"id": -1009, "type": "channel", "title": "News"},
            "chat": {"id": -1009, "type": "channel", "title": "News"},
            "date": 1,
            "text": "post",
        },
    }
    result = extract(update)
    assert isinstance(result, Ignored)
    assert kind in result.reason
    assert result.event_id == "5"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("forum_topic_created", {"name": "A", "icon_color": 1}),
        ("forum_topic_edited", {"name": "B"}),
        ("forum_topic_closed", {}),
        ("forum_topic_reopened", {}),
        ("general_forum_topic_hidden", {}),
        ("new_chat_members", [{"id": 3, "is_bot": False, "first_name": "N"}]),
        ("left_chat_member", {"id": 3, "is_bot": False, "first_name": "N"}),
        ("pinned_message", {"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}}),
    ],
)
def test_service_messages_are_ignored_with_a_reason(field: str, value: Any) -> None:
    update = topic_message()
    message = update["message"]
    del message["text"]
    message[field] = value
    result = extract(update)
    assert isinstance(result, Ignored)
    assert result.reason == f"service message: {field}"
    assert result.event_id == "900"


def test_real_topic_creation_service_message_is_ignored() -> None:
    created = topic_message()["message"]["reply_to_message"]
    result = extract({"update_id": 3, "message": created})
    assert isinstance(result, Ignored) and "forum_topic_created" in result.reason


@pytest.mark.parametrize(
    "kind", ["callback_query", "my_chat_member", "poll_answer", "guest_message", "future_x"]
)
def test_unknown_update_types_are_ignored(kind: str) -> None:
    result = extract({"update_id": 8, kind: {"anything": True}})
    assert isinstance(result, Ignored)
    assert result.reason == f"unsupported update type: {kind}"
    assert result.event_id == "8"


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        ({"update_id": 1, "message": {"message_id": 1, "date": 1, "text": "x"}}, "chat"),
        ({"update_id": 1, "message": {"message_id": 1, "chat": {"type": "private"}}}, "chat"),
        ({"update_id": 1, "message": "text"}, "not an object"),
        (
            {
                "update_id": 1,
                "message": {"chat": {"id": 1, "type": "private"}, "text": "x", "from": {"id": 1}},
            },
            "message_id",
        ),
        (
            {
                "update_id": 1,
                "message": {"message_id": 1, "chat": {"id": 1, "type": "private"}, "text": "x"},
            },
            "sender",
        ),
        ({"update_id": 1}, "without content"),
        ({"message": {}}, "update_id"),
        ({"update_id": "7", "message": {}}, "update_id"),
    ],
)
def test_unparseable_updates_are_rejected_with_a_reason(update: Any, reason: str) -> None:
    result = extract(update)
    assert isinstance(result, Rejected)
    assert reason in result.reason


def test_non_object_update_is_rejected() -> None:
    result = admit(extract_update([1, 2], bot=BOT), POLICY)  # type: ignore[arg-type]
    assert isinstance(result, Rejected)


def test_deleted_business_message() -> None:
    payload = {
        "business_connection_id": "bc-1",
        "chat": {"id": 42, "type": "private"},
        "message_ids": [17],
    }
    env = envelope({"update_id": 4, "deleted_business_messages": payload})
    assert env.kind is EventKind.DELETE and env.message_id == "17"
    assert env.key == key(42, None, scope="bc-1")
    payload["message_ids"] = [17, 18]
    result = extract({"update_id": 4, "deleted_business_messages": payload})
    assert isinstance(result, Ignored)


# --- who wrote it ---------------------------------------------------------------------------


def test_own_message_is_ignored() -> None:
    update = topic_message()
    update["message"]["from"] = {
        "id": BOT.id,
        "is_bot": True,
        "first_name": "Gateway",
        "username": BOT.username,
    }
    result = extract(update)
    assert isinstance(result, Ignored) and result.reason == "own message"


def bot_sender(update: dict[str, Any]) -> dict[str, Any]:
    update["message"]["from"] = {
        "id": 777,
        "is_bot": True,
        "first_name": "Other",
        "username": "OtherBot",
    }
    return update


def test_other_bot_is_stored_but_never_answered() -> None:
    text = "@GatewayTestBot hello"
    env = envelope(bot_sender(with_text(topic_message(), text, mention(text, "@GatewayTestBot"))))
    assert env.sender.is_bot
    assert env.trigger is Trigger.NEVER
    env = envelope(bot_sender(private_message()))
    assert env.trigger is Trigger.NEVER


def test_other_bot_answered_when_gateway_answers_bots() -> None:
    text = "@GatewayTestBot hello"
    update = bot_sender(with_text(topic_message(), text, mention(text, "@GatewayTestBot")))
    env = envelope(update, policy=rules(GATEWAY_ANSWER_BOTS=True))
    assert env.sender.is_bot and env.trigger is Trigger.ALWAYS


def test_anonymous_admin_is_a_person_not_a_bot() -> None:
    text = "@GatewayTestBot status?"
    update = with_text(topic_message(), text, mention(text, "@GatewayTestBot"))
    message = update["message"]
    message["from"] = {
        "id": 1087968824,
        "is_bot": True,
        "first_name": "Group",
        "username": "GroupAnonymousBot",
    }
    message["sender_chat"] = dict(message["chat"])
    env = envelope(update)
    assert env.sender.id == str(FORUM_ID) and not env.sender.is_bot
    assert env.trigger is Trigger.ALWAYS


def test_automatic_channel_forward_is_context() -> None:
    text = "@GatewayTestBot channel news"
    update = with_text(general_message(), text, mention(text, "@GatewayTestBot"))
    message = update["message"]
    message["from"] = {"id": 777000, "is_bot": False, "first_name": "Telegram"}
    message["sender_chat"] = {"id": -1005, "type": "channel", "title": "News"}
    message["is_automatic_forward"] = True
    env = envelope(update)
    assert env.trigger is Trigger.NEVER and env.metadata["automatic_forward"] is True


# --- triggers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "entities", "trigger"),
    [
        ("@GatewayTestBot hi", "mention", Trigger.ALWAYS),
        ("hi @gatewaytestbot", "mention", Trigger.ALWAYS),  # usernames are case-insensitive
        ("👍🏽 @GatewayTestBot what now", "mention", Trigger.ALWAYS),  # UTF-16 offsets
        ("hi @OtherBot", "mention", Trigger.NEVER),
        ("hi @GatewayTestBotX", "mention", Trigger.NEVER),
        ("just talking", None, Trigger.NEVER),
        ("@GatewayTestBot without an entity", None, Trigger.NEVER),  # Telegram always sends one
    ],
)
def test_mentions_in_groups(text: str, entities: str | None, trigger: Trigger) -> None:
    found = mention(text, "@" + text.split("@")[1].split()[0]) if entities else None
    env = envelope(with_text(topic_message(), text, found))
    assert env.trigger is trigger
    assert env.key.thread_id == "23"


def test_text_mention_of_the_bot() -> None:
    entities = [
        {
            "type": "text_mention",
            "offset": 0,
            "length": 7,
            "user": {"id": BOT.id, "is_bot": True, "first_name": "Gateway"},
        }
    ]
    env = envelope(with_text(topic_message(), "Gateway, help", entities))
    assert env.trigger is Trigger.ALWAYS


def test_caption_mention_with_a_photo() -> None:
    update = topic_message()
    message = update["message"]
    del message["text"]
    message["caption"] = "look @GatewayTestBot"
    message["caption_entities"] = mention("look @GatewayTestBot", "@GatewayTestBot")
    message["photo"] = [
        {"file_id": "a", "file_unique_id": "a", "width": 90, "height": 90, "file_size": 10},
        {"file_id": "b", "file_unique_id": "b", "width": 800, "height": 800, "file_size": 999},
    ]
    env = envelope(update)
    assert env.text == "look @GatewayTestBot"
    assert env.trigger is Trigger.ALWAYS
    assert len(env.attachments) == 1
    assert env.attachments[0].kind == "photo" and env.attachments[0].size == 999


def test_reply_to_the_bot_in_a_topic_is_answered() -> None:
    update = load_payload("telegram_update_forum_topic_reply_to_user_message.json")
    update["message"]["reply_to_message"]["from"] = {
        "id": BOT.id,
        "is_bot": True,
        "first_name": "Gateway",
    }
    env = envelope(update)
    assert env.trigger is Trigger.ALWAYS
    assert env.reply_to_id == "109"


def test_topic_created_by_the_bot_is_not_a_reply_to_the_bot() -> None:
    update = topic_message()
    update["message"]["reply_to_message"]["from"] = {
        "id": BOT.id,
        "is_bot": True,
        "first_name": "Gateway",
    }
    env = envelope(update)
    assert env.trigger is Trigger.NEVER
    assert env.reply_to_id is None


def test_topic_root_without_the_created_marker_is_not_a_reply() -> None:
    update = topic_message()
    replied = update["message"]["reply_to_message"]
    del replied["forum_topic_created"]
    replied["from"] = {"id": BOT.id, "is_bot": True, "first_name": "Gateway"}
    assert envelope(update).trigger is Trigger.NEVER


@pytest.mark.parametrize(
    ("text", "command", "trigger"),
    [
        ("/new", "new", Trigger.ALWAYS),
        ("/help", "help", Trigger.ALWAYS),
        ("/new@GatewayTestBot", "new", Trigger.ALWAYS),
        ("/NEW@gatewaytestbot", "new", Trigger.ALWAYS),
        ("/help@GatewayTestBot please", "help", Trigger.ALWAYS),
        ("/model", "model", Trigger.ALWAYS),
        ("/model@GatewayTestBot gpt-4o", "model", Trigger.ALWAYS),
        ("/new@OtherBot", None, Trigger.NEVER),
        ("/start", None, Trigger.ALWAYS),  # a command for us, but not one the core handles
        ("/newer", None, Trigger.ALWAYS),
    ],
)
def test_commands_in_a_topic(text: str, command: str | None, trigger: Trigger) -> None:
    env = envelope(with_text(topic_message(), text, command_entities(text)))
    assert env.command == command
    assert env.trigger is trigger
    assert env.key.thread_id == "23"  # /new renews this topic's session only


def test_command_without_entities_uses_the_text() -> None:
    env = envelope(with_text(topic_message(), "/new@GatewayTestBot"))
    assert env.command == "new"
    env = envelope(with_text(topic_message(), "/new@OtherBot"))
    assert env.command is None


def test_command_entity_not_at_start_is_not_a_command() -> None:
    text = "see /new"
    entities = [{"type": "bot_command", "offset": 4, "length": 4}]
    env = envelope(with_text(topic_message(), text, entities))
    assert env.command is None and env.trigger is Trigger.NEVER


def test_other_bots_command_in_private_chat_is_still_a_private_message() -> None:
    env = envelope(with_text(private_message(), "/new@OtherBot", command_entities("/new@OtherBot")))
    assert env.command is None
    assert env.trigger is Trigger.ALWAYS


def test_answer_all_chats_setting() -> None:
    policy = rules(TELEGRAM_ANSWER_ALL_CHATS=str(FORUM_ID))
    assert envelope(topic_message(), policy=policy).trigger is Trigger.ALWAYS
    assert envelope(general_message(), policy=policy).trigger is Trigger.ALWAYS
    assert envelope(nonforum_reply(), policy=policy).trigger is Trigger.NEVER


# --- allow-lists ----------------------------------------------------------------------------


def test_chat_outside_allowed_chats_is_ignored() -> None:
    policy = rules(TELEGRAM_ALLOWED_CHATS="-100999")
    result = extract(topic_message(), policy=policy)
    assert isinstance(result, Ignored)
    assert "TELEGRAM_ALLOWED_CHATS" in result.reason and str(FORUM_ID) in result.reason
    assert isinstance(
        extract(topic_message(), policy=rules(TELEGRAM_ALLOWED_CHATS=str(FORUM_ID))), Envelope
    )


def test_user_outside_allowed_users_is_ignored() -> None:
    policy = rules(TELEGRAM_ALLOWED_USERS="1")
    result = extract(topic_message(), policy=policy)
    assert isinstance(result, Ignored) and "TELEGRAM_ALLOWED_USERS" in result.reason
    policy = rules(TELEGRAM_ALLOWED_USERS="208432445", TELEGRAM_ALLOWED_CHATS=str(FORUM_ID))
    assert isinstance(extract(topic_message(), policy=policy), Envelope)


def test_edits_respect_allow_lists() -> None:
    update = topic_message()
    update["edited_message"] = update.pop("message")
    result = extract(update, policy=rules(TELEGRAM_ALLOWED_CHATS="-1"))
    assert isinstance(result, Ignored)


# --- the target never carries a non-topic thread id ---------------------------------------


@pytest.mark.parametrize(
    "update",
    [
        general_message(),
        nonforum_reply(),
        private_message(),
        load_payload("telegram_update_forum_topic_message.json"),
    ],
    ids=["general", "nonforum-reply", "private", "topic"],
)
def test_target_thread_is_the_topic_or_nothing(update: dict[str, Any]) -> None:
    env = envelope(update)
    message = update["message"]
    expected = str(message["message_thread_id"]) if message.get("is_topic_message") else None
    assert env.target.thread_id == expected
    assert env.target.thread_id != "1"
    assert env.key.thread_id == env.target.thread_id
