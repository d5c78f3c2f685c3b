"""Files out: an answer's images and files travel through the outbox like its text.

Each file is one outbox part after the answer's text parts, so it gets the same guarantees
(stored target, pacing, retries, exactly-once bookkeeping). The part's content is a
self-describing envelope, ``FILE_MARK`` + JSON with the bytes in base64; ``send_part``
routes such a part to ``Transport.send_file`` and every other part to ``Transport.send``.
``FILE_MARK`` starts with the ASCII record separator, which no text part begins with
(``encode_text_part`` guarantees it).

Size: files are kept in the outbox row, so they are capped at ``MAX_FILE_BYTES``; bigger
ones should be links. (A table of their own, a migration, would lift that; see the report.)
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import TYPE_CHECKING

from gateway.core.domain import OutgoingFile, ReplyTarget

if TYPE_CHECKING:  # the ports import the conversations, which read file parts from here
    from gateway.core.ports import SendResult, Transport

FILE_MARK = "\x1egateway-file:"
#: Telegram's photo limit; also a sane size for a row in the outbox
MAX_FILE_BYTES = 10 * 1024 * 1024


def encode_file_part(file: OutgoingFile) -> str:
    if len(file.data) > MAX_FILE_BYTES:
        raise ValueError(f"{file.name}: {len(file.data)} bytes is over {MAX_FILE_BYTES}")
    body = {
        "name": file.name,
        "mime_type": file.mime_type,
        "caption": file.caption,
        "data": base64.b64encode(file.data).decode("ascii"),
    }
    return FILE_MARK + json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def decode_file_part(content: str) -> OutgoingFile | None:
    """The file in an outbox part, or ``None`` for a text part."""
    if not content.startswith(FILE_MARK):
        return None
    try:
        body = json.loads(content[len(FILE_MARK) :])
        caption = body.get("caption")
        return OutgoingFile(
            name=str(body["name"]),
            mime_type=str(body["mime_type"]),
            data=base64.b64decode(body["data"], validate=True),
            caption=caption if isinstance(caption, str) else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        return None


def encode_text_part(part: str) -> str:
    """A text part can never be mistaken for a file part."""
    return part.lstrip("\x1e") if part.startswith(FILE_MARK) else part


def outbox_parts(transport: Transport, text: str, files: tuple[OutgoingFile, ...]) -> list[str]:
    """All the outbox parts of one answer: its text (split and formatted), then its files."""
    parts = [encode_text_part(p) for p in transport.parts(text)]
    return parts + [encode_file_part(f) for f in files]


async def send_part(
    transport: Transport, target: ReplyTarget, content: str, *, idempotency_key: str
) -> SendResult:
    """Send one outbox part: an upload for a file part, a message for a text part."""
    file = decode_file_part(content)
    if file is None:
        return await transport.send(target, content, idempotency_key=idempotency_key)
    return await transport.send_file(target, file, idempotency_key=idempotency_key)
