"""The web chat's send: publish the reply to the live streams of its exact thread."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence

from adapters.web.extract import HELD_PREFIX, PLATFORM
from gateway.core.attachments import FileFetchError, too_large
from gateway.core.domain import Attachment, OutgoingFile, ReplyTarget, SessionKey
from gateway.core.hub import Broadcast
from gateway.core.ports import HeldFiles, PaceRule, SendResult
from gateway.core.text import format_parts
from gateway.inbound.intake import live_topic


class WebTransport:
    platform = PLATFORM
    max_message_length = 20_000
    # the receipt is ours: a resend after a crash publishes again, which the page dedupes by id
    idempotent = True
    resend_window: float | None = None
    #: the page hides "typing…" 5 s after the last heartbeat, and at once on typing_done
    typing_interval = 4.0

    def __init__(self, live: Broadcast, held: HeldFiles | None = None) -> None:
        self._live = live
        #: the voice notes the web chat keeps itself (``FileSource`` for the transcription)
        self._held = held
        #: live topics whose typing indicator is held right now (told to late subscribers)
        self._typing: set[str] = set()

    def is_typing(self, topic: str) -> bool:
        return topic in self._typing

    def measure(self, text: str) -> int:
        return len(text)

    def format(self, text: str) -> str:
        return text

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[PaceRule]:
        return ()

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        event: dict[str, object] = {"type": "reply", "id": idempotency_key, "text": text}
        self._live.publish(live_topic(_key(target)), event)
        return SendResult(platform_message_id=idempotency_key)

    async def send_card(
        self, target: ReplyTarget, text: str, *, approval_id: str, idempotency_key: str
    ) -> SendResult:
        # an approval card: the page shows Approve / Deny buttons for it
        event: dict[str, object] = {
            "type": "reply",
            "id": idempotency_key,
            "text": text,
            "approval_id": approval_id,
        }
        self._live.publish(live_topic(_key(target)), event)
        return SendResult(platform_message_id=idempotency_key)

    async def fetch_file(self, attachment: Attachment, *, max_bytes: int) -> bytes:
        """A voice note kept when it was uploaded (``held:ID``)."""
        file_id = (attachment.file_id or "").removeprefix(HELD_PREFIX)
        if self._held is None or not file_id.isdigit() or len(file_id) > 18:
            raise FileFetchError(f"{attachment.name or 'the file'} was not kept")
        found = await self._held.read(int(file_id), max_bytes=max_bytes)
        if found is None:
            raise FileFetchError(f"{attachment.name or 'the file'} is gone")
        size, data = found
        if data is None:
            raise too_large(attachment.name, size, max_bytes)
        return bytes(data)

    async def send_file(
        self, target: ReplyTarget, file: OutgoingFile, *, idempotency_key: str
    ) -> SendResult:
        # inline on the live stream: the page shows a picture, or a download link
        self._live.publish(
            live_topic(_key(target)),
            {
                "type": "file",
                "id": idempotency_key,
                "name": file.name,
                "mime_type": file.mime_type,
                "caption": file.caption,
                "data": base64.b64encode(file.data).decode("ascii"),
            },
        )
        return SendResult(platform_message_id=idempotency_key)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """The page re-reads the thread on this event and shows the decision, no buttons."""
        self._live.publish(
            live_topic(_key(target)),
            {"type": "approval_decided", "id": platform_message_id, "text": text},
        )

    # --- streaming previews: events on the thread's live stream, which every
    # replica's pages see (LISTEN/NOTIFY); the page renders the growing Markdown in place

    preview_interval = 0.25

    async def send_preview(self, target: ReplyTarget, text: str) -> str:
        preview_id = f"preview-{uuid.uuid4().hex}"
        self._live.publish(live_topic(_key(target)), _preview(preview_id, text))
        return preview_id

    async def edit_preview(
        self, target: ReplyTarget, message_id: str, text: str, *, final: bool = False
    ) -> None:
        # final: the answer is stored; the page drops the preview and shows the thread
        event = {"type": "reply", "id": message_id, "text": text} if final else None
        self._live.publish(live_topic(_key(target)), event or _preview(message_id, text))

    async def delete_preview(self, target: ReplyTarget, message_id: str) -> None:
        self._live.publish(live_topic(_key(target)), {"type": "preview_gone", "id": message_id})

    # --- an earlier answer changed (gateway.core.ports.MessageEditing): the page reads the
    # thread again on these (the stored transcript shows the answer as it is now)

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        self._live.publish(
            live_topic(_key(target)), {"type": "edited", "id": message_id, "text": text}
        )

    async def delete_message(self, target: ReplyTarget, message_id: str) -> None:
        self._live.publish(live_topic(_key(target)), {"type": "deleted", "id": message_id})

    async def typing(self, target: ReplyTarget) -> None:
        topic = live_topic(_key(target))
        self._typing.add(topic)
        self._live.publish(topic, {"type": "typing"})

    async def clear_typing(self, target: ReplyTarget) -> None:
        topic = live_topic(_key(target))
        self._typing.discard(topic)
        self._live.publish(topic, {"type": "typing_done"})


def _preview(preview_id: str, text: str) -> dict[str, object]:
    # this replica's pages get it whole; a notification to the other replicas carries at
    # most ~8 kB, so a longer preview reaches them without text (their pages keep the last)
    return {"type": "preview", "id": preview_id, "text": text}


def _key(target: ReplyTarget) -> SessionKey:
    return SessionKey(
        platform=target.platform,
        scope=target.scope,
        chat_id=target.chat_id,
        thread_id=target.thread_id,
    )
