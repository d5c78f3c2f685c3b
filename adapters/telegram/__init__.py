"""Telegram surface: forum topics, General, reply chains and private chats, each reply in its
exact place (platforms.md §0-§1).

- ``extract``: pure ``Update`` dict -> ``Envelope | Ignored | Rejected`` (the routing rule).
- ``transport``: sendMessage / sendChatAction through python-telegram-bot, errors translated
  into ``DeliveryError`` once.
- ``http``: python-telegram-bot's requests over aiohttp (uploads and proxied URLs keep its
  httpx request), a fifth of httpx's CPU per call.
- ``adapter``: long polling (offset confirmed only after ``Intake.submit`` returned) or webhook
  (``POST /telegram/webhook``, secret checked), getMe / setMyCommands / setWebhook at start.

Deliberately not handled (platforms.md §1):

- Leader election for long polling: two processes polling one token get 409s (logged as
  ``telegram_polling_conflict``) and may both receive an update; the inbox dedupes, so
  nothing is answered twice, but the runtime should start polling on one leader only.
- Files are described (kind, name, MIME type, size) but not downloaded (no ``getFile``).
- Replies are plain text (no ``parse_mode``), so a split can never break an entity.
- ``sendMessage(message_thread_id=1)`` is never sent (tdlib/telegram-bot-api#798 is open);
  typing in General is sent without a thread id too.
- ``deleted_business_messages`` with several ids is ignored (one event per update); the
  business account owner's own messages are not told apart from the customer's (that needs
  ``getBusinessConnection``).
- ``external_reply`` / quotes from other chats are not treated as replies.
- A group upgraded to a supergroup (``ChatMigrated``) fails the delivery permanently instead
  of following ``migrate_to_chat_id``.
- Only per-chat (1/s) and per-group (20/min) pacing; the ~30 messages/s global limit is left
  to 429 + ``retry_after``.
- ``sendMessageDraft`` streaming, callback queries other than approval buttons (answered,
  nothing else), inline mode, and Bot API 10.x ``guest_message`` / ``managed_bot`` updates
  (ignored with a reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from adapters.telegram.plugin import plugin
from adapters.telegram.settings import TelegramSettings
from gateway.core.plugins import lazy_attributes
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

if TYPE_CHECKING:
    from adapters.telegram.adapter import TelegramAdapter
    from adapters.telegram.transport import TelegramTransport


__all__ = ["TelegramAdapter", "TelegramTransport", "create_adapter"]


def create_adapter(settings: Settings, context: AdapterContext) -> PlatformAdapter:
    """The adapter as a ``module:factory`` (GATEWAY_ADAPTERS style); the core builds it through
    its plugin (``adapters.telegram.plugin``). No I/O until ``start``."""
    return plugin.create(settings.surface(TelegramSettings), settings, context)


__getattr__ = lazy_attributes(
    __name__,
    {
        "TelegramAdapter": "adapters.telegram.adapter",
        "TelegramTransport": "adapters.telegram.transport",
    },
)
