"""How a turn's answer becomes outbox rows: the one place a turn writes outbox parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.core.domain import Reply
from gateway.core.parts import DeletePart, EditPart, stored
from gateway.core.ports import Transport
from gateway.outbox.files import outbox_parts
from session_store.records import DeliveryRecord, OutgoingReply
from session_store.values import as_stored

#: said before an answer written again for an edited question where the platform cannot
#: edit the old answer, so it goes in the thread as a new message
EDITED_NOTE = "✏️ (answer to the edited message)"
#: an ``EditPart`` with nothing to edit: sent as a new message, with the note
NOTHING_TO_EDIT = 0


def outgoing(
    transport: Transport,
    replies: Sequence[Reply],
    *,
    handled_seq: int,
    finishes_stream: bool = False,
) -> list[OutgoingReply]:
    """The rows of a turn's replies: tool calls and results for the transcript only, every
    other reply with the typed parts it is delivered as (those of a streamed answer finish its
    previews: ``gateway.outbox.stream_finish``)."""
    out: list[OutgoingReply] = []
    for reply in replies:
        # where this reply sits in the transcript: after what it answered, even though
        # messages that arrived meanwhile have lower seq numbers (gateway.turns.context)
        reply = replace(reply, metadata={**reply.metadata, "answers_seq": handled_seq})
        role = reply.exchange_role
        if role is not None:
            # a tool call or result: stored in the transcript, never delivered
            out.append(
                OutgoingReply(
                    content=reply.text,
                    parts=[],
                    model=reply.model,
                    metadata=reply.metadata,
                    role=role,
                )
            )
            continue
        parts = outbox_parts(transport, reply.text, reply.files, finishes_stream=finishes_stream)
        if not parts:
            continue
        out.append(
            OutgoingReply(
                content=reply.text,
                parts=[stored(p) for p in parts],
                model=reply.model,
                tokens_used=reply.tokens_used,
                metadata=reply.metadata,
            )
        )
    return out


def rewritten(
    replies: Sequence[OutgoingReply], old: Sequence[DeliveryRecord]
) -> list[OutgoingReply]:
    """The rows of an answer written again for its edited question (``on_edit = "update"``):
    its text parts edit the old answer's text parts ``old`` in place, in order; text beyond
    them goes out as new messages, old parts beyond it are deleted. With nothing to edit,
    the answer is sent with a note saying it answers the edited message."""
    out: list[OutgoingReply] = []
    index = 0
    for reply in replies:
        parts = []
        for raw in reply.parts:
            part = as_stored(raw)
            if part.kind != "text":
                parts.append(part)
                continue
            earlier = old[index].id if index < len(old) else NOTHING_TO_EDIT
            if earlier != NOTHING_TO_EDIT or index == 0:
                part = stored(EditPart(text=part.content, delivery_id=earlier, note=EDITED_NOTE))
            parts.append(part)
            index += 1
        out.append(replace(reply, parts=parts))
    surplus = [stored(DeletePart(delivery_id=d.id)) for d in old[index:]]
    delivered = [i for i, reply in enumerate(out) if reply.parts]
    if surplus and delivered:
        last = delivered[-1]
        out[last] = replace(out[last], parts=[*out[last].parts, *surplus])
    return out
