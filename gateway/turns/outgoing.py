"""How a turn's answer becomes outbox rows: the one place a turn writes outbox parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.core.domain import Reply
from gateway.core.parts import stored
from gateway.core.ports import Transport
from gateway.outbox.files import outbox_parts
from session_store.records import OutgoingReply


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
