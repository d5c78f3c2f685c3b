"""Files out: an answer's images and files travel through the outbox like its text.

Each file is one outbox part after the answer's text parts (a ``FilePart``,
``gateway.core.parts``), so it gets the same guarantees (stored target, pacing, retries,
exactly-once bookkeeping). The row says it is a file in its ``kind`` column and keeps the
name, type and caption as typed fields and the bytes in a column of their own (migration
0016); delivery routes it to ``Transport.send_file``.

Size: files are kept in the outbox row, so they are capped at ``MAX_FILE_BYTES``; bigger
ones should be links.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.core.domain import OutgoingFile
from gateway.core.parts import MAX_FILE_BYTES, FilePart, OutboxPart, TextPart

if TYPE_CHECKING:  # the ports import the conversations, which read file parts from here
    from gateway.core.ports import Transport

__all__ = ["MAX_FILE_BYTES", "outbox_parts"]


def outbox_parts(
    transport: Transport,
    text: str,
    files: tuple[OutgoingFile, ...],
    *,
    finishes_stream: bool = False,
) -> list[OutboxPart]:
    """All the outbox parts of one answer: its text (split and formatted), then its files.
    ``finishes_stream``: the answer was streamed into previews, which its parts finish."""
    parts: list[OutboxPart] = [
        TextPart(text=p, finishes_stream=finishes_stream) for p in transport.parts(text)
    ]
    return parts + [FilePart(file=f, finishes_stream=finishes_stream) for f in files]
