"""How a turn's answer becomes outbox rows: the one place a turn writes outbox parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.core.domain import Reply, ReplyTarget
from gateway.core.ports import Transport
from gateway.outbox.files import outbox_parts
from gateway.outbox.streaming import PREVIEW_EXTRA
from session_store.records import OutgoingReply

#: marks a reply that is part of the tool exchange (``gateway.turns.stages.tools``)
TOOL_ROLE = "tool_exchange_role"


def outgoing(
    transport: Transport, replies: Sequence[Reply], *, handled_seq: int
) -> list[OutgoingReply]:
    """The rows of a turn's replies: tool calls and results for the transcript only, every
    other reply with the parts it is delivered as."""
    out: list[OutgoingReply] = []
    for reply in replies:
        # where this reply sits in the transcript: after what it answered, even though
        # messages that arrived meanwhile have lower seq numbers (gateway.turns.context)
        reply = replace(reply, metadata={**reply.metadata, "answers_seq": handled_seq})
        role = reply.metadata.get(TOOL_ROLE)
        if role in ("assistant", "tool"):
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
        parts = outbox_parts(transport, reply.text, reply.files)
        if not parts:
            continue
        out.append(
            OutgoingReply(
                content=reply.text,
                parts=parts,
                model=reply.model,
                tokens_used=reply.tokens_used,
                metadata=reply.metadata,
            )
        )
    return out


def delivered_to(target: ReplyTarget, *, previews_after: int | None) -> ReplyTarget:
    """The target the answer's deliveries carry: a streamed answer's say that the delivery
    edits its previews into the answer (``gateway.outbox.streaming.finish_part``)."""
    if previews_after is None:
        return target
    return replace(target, extra={**target.extra, PREVIEW_EXTRA: "1"})
