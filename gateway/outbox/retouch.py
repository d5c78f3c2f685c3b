"""An earlier answer changed, in the outbox: the delivery of an ``EditPart`` edits the
platform message of the part it names to the new text (an answer written again for its
edited question), a ``DeletePart`` deletes it (an answer retracted with its deleted
question). The part names the earlier delivery; its platform message id is read here, at
delivery time, since the delivery worker sends a session's parts in order and the earlier
one is done by then.

Both are safe to repeat (the same text again, a message gone already), so an attempt that may
or may not have reached the platform is retried, never given up as ambiguous. Where the
platform cannot edit (or refuses this edit for good) the new text goes out as a new message in
the thread, with the part's note before it saying which message it answers."""

from __future__ import annotations

import structlog

from gateway.core.errors import DeliveryError, StoreError
from gateway.core.parts import DeletePart, EditPart
from gateway.core.ports import MessageEditing, SendResult, Transport
from session_store.records import DeliveryRecord
from session_store.repos.outbox import Outbox

log = structlog.get_logger(__name__)


async def retouch(
    outbox: Outbox, transport: Transport, delivery: DeliveryRecord, part: EditPart | DeletePart
) -> SendResult:
    """Deliver one edit or deletion of an earlier part (see the module docstring)."""
    try:
        earlier = await outbox.delivery(part.delivery_id)
    except StoreError as exc:
        # nothing was sent: retried like any transient failure
        raise DeliveryError(f"the earlier part is unreadable: {exc}") from exc
    shown = None
    if earlier is not None and earlier.status == "sent":
        shown = earlier.platform_message_id
    target = earlier.target if earlier is not None else delivery.target
    if isinstance(part, DeletePart):
        if shown is None:
            return SendResult(platform_message_id=None)  # nothing of it shows
        if not isinstance(transport, MessageEditing):
            raise DeliveryError("this platform cannot delete the bot's messages", permanent=True)
        try:
            await transport.delete_message(target, shown)
        except DeliveryError as exc:
            if exc.ambiguous:
                raise DeliveryError(f"delete: {exc}", retry_after=exc.retry_after) from exc
            raise
        return SendResult(platform_message_id=shown)
    if shown is not None and isinstance(transport, MessageEditing):
        try:
            await transport.edit_message(target, shown, part.text)
        except DeliveryError as exc:
            if exc.ambiguous:
                raise DeliveryError(f"edit: {exc}", retry_after=exc.retry_after) from exc
            if exc.retry_after is not None or not exc.permanent:
                raise
            # gone, or too old to edit: the answer goes in the thread as a new message
            log.warning("answer_edit_refused", delivery_id=delivery.id, error=str(exc))
        else:
            return SendResult(platform_message_id=shown)
    text = f"{transport.format(part.note)}\n\n{part.text}" if part.note else part.text
    return await transport.send(delivery.target, text, idempotency_key=f"gw-{delivery.id}")
