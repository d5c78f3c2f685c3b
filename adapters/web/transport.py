"""The web chat's send: publish the reply to the live streams of its exact thread."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.web.extract import PLATFORM
from gateway.domain import ReplyTarget, SessionKey
from gateway.hub import Broadcast
from gateway.intake import live_topic
from gateway.ports import SendResult
from gateway.text import format_parts


class WebTransport:
    platform = PLATFORM
    max_message_length = 20_000
    # the receipt is ours: a resend after a crash publishes again, which the page dedupes by id
    idempotent = True
    resend_window: float | None = None
    #: the page hides "typing…" 5 s after the last heartbeat, and at once on typing_done
    typing_interval = 4.0

    def __init__(self, live: Broadcast) -> None:
        self._live = live

    def measure(self, text: str) -> int:
        return len(text)

    def format(self, text: str) -> str:
        return text

    def parts(self, text: str) -> list[str]:
        return format_parts(text, self.max_message_length, self.measure, self.format)

    def pace(self, target: ReplyTarget) -> Sequence[tuple[str, float]]:
        return ()

    async def send(self, target: ReplyTarget, text: str, *, idempotency_key: str) -> SendResult:
        self._live.publish(
            live_topic(_key(target)), {"type": "reply", "id": idempotency_key, "text": text}
        )
        return SendResult(platform_message_id=idempotency_key)

    async def typing(self, target: ReplyTarget) -> None:
        self._live.publish(live_topic(_key(target)), {"type": "typing"})

    async def clear_typing(self, target: ReplyTarget) -> None:
        self._live.publish(live_topic(_key(target)), {"type": "typing_done"})


def _key(target: ReplyTarget) -> SessionKey:
    return SessionKey(
        platform=target.platform,
        scope=target.scope,
        chat_id=target.chat_id,
        thread_id=target.thread_id,
    )
