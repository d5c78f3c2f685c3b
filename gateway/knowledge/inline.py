"""Files shared with a question: which go straight to the model (images, short text) and
which into the thread's knowledge base."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.core.domain import Attachment
from session_store.records import MessageRecord


def shared_files(messages: Sequence[MessageRecord]) -> list[Attachment]:
    """The files people shared in ``messages`` (user messages' stored attachment metadata)."""
    out: list[Attachment] = []
    for m in messages:
        if m.role != "user":
            continue
        for item in m.metadata.get("attachments") or ():
            if isinstance(item, Mapping) and isinstance(item.get("kind"), str):
                size = item.get("size")
                out.append(
                    Attachment(
                        kind=item["kind"],
                        name=item.get("name") if isinstance(item.get("name"), str) else None,
                        url=item.get("url") if isinstance(item.get("url"), str) else None,
                        mime_type=item.get("mime_type")
                        if isinstance(item.get("mime_type"), str)
                        else None,
                        size=size if isinstance(size, int) else None,
                        file_id=item.get("file_id")
                        if isinstance(item.get("file_id"), str)
                        else None,
                    )
                )
    return out


#: the largest text file that goes straight to the model (``AGENT_INLINE_FILES=text``)
INLINE_TEXT_BYTES = 32 * 1024


_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")


_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".csv")


def _inline_kind(a: Attachment) -> str | None:
    """``images`` or ``text`` for a file that could go straight to the model, by its
    declared type or name (the bytes are checked once fetched)."""
    mime = (a.mime_type or "").split(";", 1)[0].strip().lower()
    name = (a.name or "").lower()
    if a.kind in ("photo", "image") or mime.startswith("image/") or name.endswith(_IMAGE_SUFFIXES):
        return "images"
    if mime in ("text/plain", "text/markdown", "text/csv") or name.endswith(_TEXT_SUFFIXES):
        return "text"
    return None


def image_type(data: bytes) -> str | None:
    """The media type of a PNG, JPEG, GIF or WebP image, from its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None
