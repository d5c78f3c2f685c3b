"""Typed outbox parts: what one outbox row delivers, as a kind and typed fields, never as
markers inside its text.

A row stores its part in columns (migration 0016): ``kind``, ``content`` (the text, or a
file's caption: what a person reads), ``part`` (a JSON document of the kind's other fields,
with its format version ``v``) and ``data`` (a file's bytes): ``StoredPart`` in the store.
``stored`` and ``part_of`` are the two directions; delivery dispatches on the type.

* ``TextPart``: a message (already split and formatted for the platform).
* ``FilePart``: an upload into the thread, after the answer's text.
* ``ApprovalCardPart``: the card asking to approve a tool call, with the request's id (a
  transport that can show buttons adds them).
* ``EditPart``: an earlier part's platform message edited to a new text (an answer written
  again for its edited question), named by that part's delivery id; where the platform
  cannot edit, the text goes out as a new message with ``note`` before it.
* ``DeletePart``: an earlier part's platform message deleted (an answer retracted with its
  deleted question).

``finishes_stream`` (text and file parts): the part belongs to an answer that was streamed
into previews; its delivery edits its preview into the final text, or deletes the previews
left over (``gateway.outbox.stream_finish``), instead of sending it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gateway.core.domain import OutgoingFile
from session_store.records import DeliveryRecord
from session_store.values import StoredPart

#: the version of the ``part`` document this code writes (and the newest it reads)
PART_VERSION = 1
#: Telegram's photo limit; also a sane size for a row in the outbox
MAX_FILE_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    text: str
    finishes_stream: bool = False
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True, kw_only=True)
class FilePart:
    file: OutgoingFile
    finishes_stream: bool = False
    kind: Literal["file"] = "file"

    def __post_init__(self) -> None:
        if len(self.file.data) > MAX_FILE_BYTES:
            raise ValueError(
                f"{self.file.name}: {len(self.file.data)} bytes is over {MAX_FILE_BYTES}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalCardPart:
    text: str
    approval_id: str
    kind: Literal["approval_card"] = "approval_card"


@dataclass(frozen=True, slots=True, kw_only=True)
class EditPart:
    text: str
    #: the delivery whose platform message is edited
    delivery_id: int
    #: said before the text when it has to be sent as a new message instead
    note: str = ""
    kind: Literal["edit_message"] = "edit_message"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletePart:
    #: the delivery whose platform message is deleted
    delivery_id: int
    kind: Literal["delete_message"] = "delete_message"


OutboxPart = TextPart | FilePart | ApprovalCardPart | EditPart | DeletePart


def stored(part: OutboxPart | str) -> StoredPart:
    """The columns of ``part`` (a plain string is a text part)."""
    if isinstance(part, str):
        part = TextPart(text=part)
    doc: dict[str, Any] = {"v": PART_VERSION}
    match part:
        case TextPart():
            if part.finishes_stream:
                doc["finishes_stream"] = True
            return StoredPart("text", part.text, doc)
        case FilePart(file=file):
            doc.update(name=file.name, mime_type=file.mime_type)
            if file.caption is not None:
                doc["caption"] = file.caption
            if part.finishes_stream:
                doc["finishes_stream"] = True
            return StoredPart("file", file.caption or "", doc, file.data)
        case ApprovalCardPart():
            doc["approval_id"] = part.approval_id
            return StoredPart("approval_card", part.text, doc)
        case EditPart():
            doc["delivery_id"] = part.delivery_id
            if part.note:
                doc["note"] = part.note
            return StoredPart("edit_message", part.text, doc)
        case DeletePart():
            doc["delivery_id"] = part.delivery_id
            return StoredPart("delete_message", "", doc)


def part_of(delivery: DeliveryRecord) -> OutboxPart:
    """The typed part a delivery row holds."""
    return from_stored(delivery.kind, delivery.content, delivery.part, delivery.data)


def from_stored(
    kind: str, content: str, doc: Mapping[str, Any] | None, data: bytes | None
) -> OutboxPart:
    """The part a row holds. A row of an unknown kind or a newer document version raises
    ``ValueError``: delivering it as text could post something nobody meant to read."""
    doc = doc or {}
    version = doc.get("v", PART_VERSION)
    if not isinstance(version, int) or version > PART_VERSION:
        raise ValueError(f"outbox part version {version!r} is newer than this code")
    streamed = doc.get("finishes_stream") is True
    if kind == "text":
        return TextPart(text=content, finishes_stream=streamed)
    if kind == "file":
        caption = doc.get("caption")
        file = OutgoingFile(
            name=str(doc["name"]),
            mime_type=str(doc["mime_type"]),
            data=data or b"",
            caption=caption if isinstance(caption, str) else None,
        )
        return FilePart(file=file, finishes_stream=streamed)
    if kind == "approval_card":
        return ApprovalCardPart(text=content, approval_id=str(doc["approval_id"]))
    if kind == "edit_message":
        note = doc.get("note")
        return EditPart(
            text=content,
            delivery_id=int(doc["delivery_id"]),
            note=note if isinstance(note, str) else "",
        )
    if kind == "delete_message":
        return DeletePart(delivery_id=int(doc["delivery_id"]))
    raise ValueError(f"unknown outbox part kind {kind!r}")
