"""Telegram as a surface plugin: its settings, ``gateway setup telegram``, the adapter."""

from __future__ import annotations

import argparse
import secrets

from adapters.telegram.extract import answer_settings
from adapters.telegram.settings import TelegramSettings
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import ConfigError
from gateway.core.plugins import Prompter, SetupFlag, SetupSpec, Shorthand, SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings ``gateway setup telegram`` writes, from flags first, then prompts."""
    values: dict[str, str] = {}
    values["TELEGRAM_BOT_TOKEN"] = args.token or prompter.ask(
        "Bot token from BotFather (not shown): ",
        setting="TELEGRAM_BOT_TOKEN",
        flag="--token",
        secret=True,
    )
    mode = args.mode or prompter.choose("Receive updates by", ("polling", "webhook"), "polling")
    if mode not in ("polling", "webhook"):
        raise ConfigError("TELEGRAM_MODE", "--mode must be polling or webhook")
    values["TELEGRAM_MODE"] = mode
    if mode == "webhook":
        values["TELEGRAM_WEBHOOK_URL"] = args.webhook_url or prompter.ask(
            "Public https URL of POST /telegram/webhook: ",
            setting="TELEGRAM_WEBHOOK_URL",
            flag="--webhook-url",
            secret=False,
        )
        # required in webhook mode; made here so nobody has to invent one
        values["TELEGRAM_WEBHOOK_SECRET"] = args.webhook_secret or secrets.token_hex(32)
    if args.api_base_url:
        values["TELEGRAM_API_BASE_URL"] = args.api_base_url
    return values


class TelegramPlugin(SurfacePlugin[TelegramSettings]):
    name = "telegram"
    settings_class = TelegramSettings
    enabling_setting = "TELEGRAM_BOT_TOKEN"
    webhook_prefixes = ("/telegram/",)
    setup = SetupSpec(
        flags=(
            SetupFlag("--token", "Telegram bot token"),
            SetupFlag("--mode", "telegram: polling|webhook (polling)"),
            SetupFlag("--webhook-url", "telegram webhook mode: the public https URL"),
            SetupFlag(
                "--webhook-secret", "telegram webhook mode: the secret (default: a random one)"
            ),
            SetupFlag(
                "--api-base-url", "a non-default Bot API server (a local Bot API server, a fake)"
            ),
        ),
        collect=collect,
        enabling=("TELEGRAM_BOT_TOKEN",),
        guide="docs/how-to/telegram.md",
    )

    def enabled(self, settings: TelegramSettings, core: Settings) -> bool:
        return settings.telegram_bot_token is not None

    def create(
        self, settings: TelegramSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # the platform's client library only when a gateway builds the adapter
        from adapters.telegram.adapter import TelegramAdapter

        return TelegramAdapter(settings)

    def answer_settings(self, settings: TelegramSettings) -> Shorthand:
        return answer_settings(settings)

    def place_target(self, key: SessionKey) -> ReplyTarget:
        """A chat, or a forum topic (``message_thread_id``); the General topic (id 1) is
        sent without one (Telegram refuses it: platforms.md §1.3); a business connection's
        chat travels with its ``business_connection_id``."""
        topic = None if key.thread_id in (None, "1") else key.thread_id
        extra = {} if key.scope == "bot" else {"business_connection_id": key.scope}
        return ReplyTarget(
            platform=key.platform,
            scope=key.scope,
            chat_id=key.chat_id,
            thread_id=topic,
            extra=extra,
        )


plugin = TelegramPlugin()
