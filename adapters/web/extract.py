"""The web chat's inbound message: JSON from the browser, validated, to an Envelope.

The web chat is platform ``web``: a channel is the chat, a thread is the thread. A message
without a thread starts one whose id is the message's own id (as a Slack root ts does).

Every post in the web chat is written to the assistant: it is reported as a mention, in a
person's private channel (``~name``) as a direct message, and the core's ingress decides (it
answers them all)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from gateway.core.commands import command_name
from gateway.core.domain import (
    Attachment,
    Envelope,
    EventKind,
    Facts,
    Rejected,
    ReplyTarget,
    Sender,
    SessionKey,
)

PLATFORM = "web"
SCOPE = "local"
MAX_TEXT = 20_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
#: a shared channel, or a person's private one (``~name``, see gateway.http.webauth)
CHANNEL = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}|~[A-Za-z0-9][A-Za-z0-9_.@+-]{0,63})$")
THREAD = _NAME
#: what a post may carry; the sender is the signed-in person, never a field of the body
_KEYS = frozenset({"text", "client_msg_id", "thread_id"})


def text_problem(text: object) -> str | None:
    """Why ``text`` cannot be a message's text (a new one or an edit), or None."""
    if not isinstance(text, str) or not text.strip():
        return "text must be a non-empty string"
    if len(text) > MAX_TEXT:
        return f"text is longer than {MAX_TEXT} characters"
    if "\x00" in text:
        return "text must not contain NUL characters"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "text is not valid Unicode (a lone surrogate)"
    return None


def extract(channel: str, body: Mapping[str, Any], *, sender: str) -> Envelope | Rejected:
    """``sender`` is the signed-in person (from ``gateway.http.webauth``)."""

    def reject(reason: str) -> Rejected:
        return Rejected(platform=PLATFORM, reason=reason, event_id=None)

    if not CHANNEL.match(channel):
        return reject("channel must be 1-64 letters, digits, '.', '_' or '-'")
    extra = set(body) - _KEYS
    if extra:
        return reject(f"unknown fields: {', '.join(sorted(str(k)[:40] for k in extra)[:5])}")
    text = body.get("text")
    wrong = text_problem(text)
    if wrong is not None or not isinstance(text, str):
        return reject(wrong or "text must be a non-empty string")
    client_id = body.get("client_msg_id")
    if not isinstance(client_id, str) or not _NAME.match(client_id):
        return reject("client_msg_id must be 1-64 letters, digits, '.', '_' or '-'")
    thread = body.get("thread_id")
    if thread is not None and (not isinstance(thread, str) or not _NAME.match(thread)):
        return reject("thread_id must be 1-64 letters, digits, '.', '_' or '-'")
    thread_id = thread or client_id
    key = SessionKey(platform=PLATFORM, scope=SCOPE, chat_id=channel, thread_id=thread_id)
    facts = Facts(place=key, person=sender, direct=channel.startswith("~"), mentioned=True)
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM,
            scope=SCOPE,
            chat_id=channel,
            thread_id=thread_id,
            reply_to_message_id=client_id,
        ),
        message_id=client_id,
        event_id=None,
        text=text,
        sender=Sender(id=sender, name=sender),
        command=command_name(text),
        facts=facts,
    )


#: a web voice note's attachment names its held file so: ``held:ID``
HELD_PREFIX = "held:"


def voice_note(
    key: SessionKey, sender: str, file_id: int, *, name: str, media_type: str | None, size: int
) -> Envelope:
    """A voice note recorded or uploaded in the web chat: a message with no text and its audio
    (kept by the gateway, ``HeldFiles``), answered once it is transcribed."""
    message_id = f"voice-{file_id}"
    facts = Facts(place=key, person=sender, direct=key.chat_id.startswith("~"), mentioned=True)
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM,
            scope=SCOPE,
            chat_id=key.chat_id,
            thread_id=key.thread_id,
            reply_to_message_id=message_id,
        ),
        message_id=message_id,
        event_id=None,
        text="",
        sender=Sender(id=sender, name=sender),
        attachments=(
            Attachment(
                kind="audio",
                name=name,
                mime_type=media_type,
                size=size,
                file_id=f"{HELD_PREFIX}{file_id}",
            ),
        ),
        facts=facts,
    )


def change(
    key: SessionKey, message_id: str, sender: str, *, text: str | None
) -> Envelope | Rejected:
    """An edit (``text``) or a deletion (``None``) of the person's own message
    ``message_id`` in the thread ``key``. Its event id names the change (the message, and for
    an edit its new text), so a retried request counts once."""
    wrong = None if text is None else text_problem(text)
    if wrong is not None:
        return Rejected(platform=PLATFORM, reason=wrong)
    facts = Facts(place=key, person=sender, direct=key.chat_id.startswith("~"), mentioned=True)
    digest = hashlib.sha256((text or "").encode("utf-8")).hexdigest()[:16]
    return Envelope(
        key=key,
        target=ReplyTarget(
            platform=PLATFORM,
            scope=SCOPE,
            chat_id=key.chat_id,
            thread_id=key.thread_id,
            reply_to_message_id=message_id,
        ),
        message_id=message_id,
        event_id=f"edit:{message_id}:{digest}" if text is not None else f"delete:{message_id}",
        text=text or "",
        sender=Sender(id=sender, name=sender),
        kind=EventKind.EDIT if text is not None else EventKind.DELETE,
        facts=facts,
    )
