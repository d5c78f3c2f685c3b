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
