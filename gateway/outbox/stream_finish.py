"""The end of a streamed answer, in the outbox: the delivery of each part of an answer that
was streamed into previews (``gateway.outbox.streaming``) edits its preview into the final text in
place, and the last one deletes the previews the final text does not need. Nothing sends the
full text again after a partial. A part says it belongs to such an answer with its
``finishes_stream`` field (``gateway.core.parts``); the previews were bound to its reply when
the turn recorded it (``Outbox.finish_turn_outbox(previews_after=...)``)."""

from __future__ import annotations

import asyncio

import structlog

from gateway.core.errors import DeliveryError
from gateway.core.parts import FilePart, TextPart
from gateway.core.ports import Previewing, SendResult, Transport
from gateway.outbox.pacing import NO_LIMIT, Budget, pace_rules
from session_store.records import DeliveryRecord
from session_store.repos.previews import PreviewStore

log = structlog.get_logger(__name__)


async def finish_part(
    store: PreviewStore,
    transport: Transport,
    delivery: DeliveryRecord,
    part: TextPart | FilePart,
    budget: Budget | None = None,
) -> SendResult | None:
    """The delivery of one part of an answer that was streamed: edit its preview into the
    final text in place, and on the last part delete the previews it does not need. Returns
    None when this part has no preview (the caller sends it as usual). Only called for parts
    that say ``finishes_stream``. The first platform call uses the slot the
    delivery reserved; with ``budget`` each further one (deletes, then the edit or the send)
    reserves its own."""
    calls = 0

    async def paced() -> None:
        nonlocal calls
        calls += 1
        if budget is not None and calls > 1:
            wait = await budget.reserve(pace_rules(transport, delivery.target), NO_LIMIT)
            if wait > 0:
                await asyncio.sleep(wait)

    if not isinstance(transport, Previewing):
        return None
    previews = await store.for_reply(delivery.session_id, delivery.seq_no)
    if not previews:
        return None
    is_file = isinstance(part, FilePart)
    final_parts = previews[0].final_parts or 0
    if is_file:
        # the text is over (files come after it): no preview is left for this or later parts
        surplus = [p for p in previews if p.part_no >= delivery.part_no and not p.deleted]
    elif delivery.part_no >= final_parts:
        surplus = [p for p in previews if p.part_no > final_parts and not p.deleted]
    else:
        surplus = []
    for p in surplus:
        await paced()
        try:
            await transport.delete_preview(delivery.target, p.platform_message_id)
        except DeliveryError as exc:
            if exc.permanent:
                # cannot be deleted (too old, no right): it must not hold the answer back
                log.warning("stream_surplus_preview_kept", error=str(exc))
                continue
            # deleting twice is harmless: retried, never given up as ambiguous
            raise DeliveryError(f"preview delete: {exc}", retry_after=exc.retry_after) from exc
    if surplus:
        await store.mark_deleted(delivery.session_id, delivery.seq_no, [p.part_no for p in surplus])
    mine = next((p for p in previews if p.part_no == delivery.part_no and not p.deleted), None)
    if mine is None or is_file:
        if calls:
            await paced()  # the send that follows
        return None
    await paced()
    try:
        assert isinstance(part, TextPart)
        await transport.edit_preview(
            delivery.target, mine.platform_message_id, part.text, final=True
        )
    except DeliveryError as exc:
        if exc.ambiguous:
            # an edit (unlike a send) can be repeated safely: the same text twice is "not
            # modified", never a second message - so a timeout is a plain retry
            raise DeliveryError(f"preview edit: {exc}", retry_after=exc.retry_after) from exc
        if exc.retry_after is not None or not exc.permanent:
            raise  # the delivery worker retries (retry_after honoured)
        # the preview is gone (deleted by someone) or cannot be edited: send it instead
        log.warning("stream_final_edit_refused", error=str(exc))
        await store.mark_deleted(delivery.session_id, delivery.seq_no, [delivery.part_no])
        await paced()  # the send that follows
        return None
    return SendResult(platform_message_id=mine.platform_message_id)
