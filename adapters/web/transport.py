"""The web chat's send: publish the reply to the live streams of its exact thread."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.web.extract import PLATFORM
from gateway.domain import ReplyTarget, SessionKey
from gateway.hub import Broadcast
from gateway.intake import live_topic
from gateway.ports import APPROVAL_EXTRA, SendResult


class WebTransport:
    platform = PLATFORM
    max_message_length = 20_000
    # the receipt is ours: a resend after a crash publishes again, which the page dedupes by id
    idempotent = True
    resend_window: float | None = None

    def __init__(self, live: Broadcast) -> None:
        self._live = live

    def measure(self, text: str) -> int:
        return len(text)

    def format(self, text: str) -> str:
        return text

    def pace(self, target: ReplyTarget) -> Sequence[tuple[str, float]]:
        return ()

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        key = SessionKey(
            platform=target.platform,
            scope=target.scope,
            chat_id=target.chat_id,
            thread_id=target.thread_id,
        )
        event: dict[str, object] = {"type": "reply", "id": idempotency_key, "text": text}
        approval = target.extra.get(APPROVAL_EXTRA)
        if approval:
            # an approval card (issue 14): the page shows Approve / Deny buttons for it
            event["approval_id"] = approval
        self._live.publish(live_topic(key), event)
        return SendResult(platform_message_id=idempotency_key)

    async def retire_card(self, target: ReplyTarget, platform_message_id: str, text: str) -> None:
        """The page re-reads the thread on this event and shows the decision, no buttons."""
        self._live.publish(
            live_topic(_key(target)),
            {"type": "approval_decided", "id": platform_message_id, "text": text},
        )

    async def typing(self, target: ReplyTarget) -> None:
        self._live.publish(live_topic(_key(target)), {"type": "typing"})


def _key(target: ReplyTarget) -> SessionKey:
    return SessionKey(
        platform=target.platform,
        scope=target.scope,
        chat_id=target.chat_id,
        thread_id=target.thread_id,
    )
