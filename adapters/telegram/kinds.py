"""What a Telegram message holds: the Bot API fields that make it content (text, media, other
user content) or a service message (an event, not content), and its one attachment's
metadata. Pure; used by the extraction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.domain import Attachment

#: message fields that make it a conversational message (text or user content)
MEDIA_KINDS = (
    "photo",
    "document",
    "video",
    "audio",
    "voice",
    "animation",
    "sticker",
    "video_note",
    "paid_media",
)
OTHER_CONTENT = (
    "contact",
    "location",
    "venue",
    "poll",
    "dice",
    "game",
    "story",
    "invoice",
    "checklist",
)

#: service-message markers (Bot API "Message" fields that describe an event, not content)
SERVICE_FIELDS = (
    "forum_topic_created",
    "forum_topic_edited",
    "forum_topic_closed",
    "forum_topic_reopened",
    "general_forum_topic_hidden",
    "general_forum_topic_unhidden",
    "new_chat_members",
    "left_chat_member",
    "new_chat_title",
    "new_chat_photo",
    "delete_chat_photo",
    "group_chat_created",
    "supergroup_chat_created",
    "channel_chat_created",
    "message_auto_delete_timer_changed",
    "migrate_to_chat_id",
    "migrate_from_chat_id",
    "pinned_message",
    "successful_payment",
    "refunded_payment",
    "users_shared",
    "chat_shared",
    "connected_website",
    "write_access_allowed",
    "proximity_alert_triggered",
    "boost_added",
    "chat_background_set",
    "checklist_tasks_done",
    "checklist_tasks_added",
    "direct_message_price_changed",
    "giveaway_created",
    "giveaway_completed",
    "giveaway_winners",
    "video_chat_scheduled",
    "video_chat_started",
    "video_chat_ended",
    "video_chat_participants_invited",
    "web_app_data",
    "gift",
    "unique_gift",
    "paid_message_price_changed",
)


def kind_of_content(message: Mapping[str, Any], *, has_text: bool) -> str | None:
    if isinstance(message.get("text"), str):
        return "text"
    for kind in (*MEDIA_KINDS, *OTHER_CONTENT):
        if kind in message:
            return kind
    return "text" if has_text else None


def attachments_of(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    for kind in MEDIA_KINDS:
        value = message.get(kind)
        if kind == "photo" and isinstance(value, list) and value:
            # photo is a list of sizes; the last one is the largest (Bot API "PhotoSize")
            value = value[-1]
        if not isinstance(value, Mapping):
            continue
        size = value.get("file_size")
        name = value.get("file_name")
        mime = value.get("mime_type")
        file_id = value.get("file_id")
        return (
            Attachment(
                kind=kind,
                name=name if isinstance(name, str) else None,
                mime_type=mime if isinstance(mime, str) else None,
                size=size if is_int(size) else None,
                file_id=file_id if isinstance(file_id, str) else None,
            ),
        )
    return ()


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
