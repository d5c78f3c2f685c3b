"""Discord as a surface plugin: its settings, ``gateway setup discord``, the adapter."""

from __future__ import annotations

import argparse

from adapters.discord.settings import DEFAULT_API_BASE_URL, DiscordSettings
from gateway.core.plugins import Prompter, SetupFlag, SetupSpec, SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings ``gateway setup discord`` writes, from flags first, then prompts."""
    values = {
        "DISCORD_BOT_TOKEN": args.token
        or prompter.ask(
            "Bot token (Developer Portal > your application > Bot; not shown): ",
            setting="DISCORD_BOT_TOKEN",
            flag="--token",
            secret=True,
        )
    }
    api = getattr(args, "api_base_url", None)
    if api and api.rstrip("/") != DEFAULT_API_BASE_URL:
        values["DISCORD_API_BASE_URL"] = api
    return values


class DiscordPlugin(SurfacePlugin[DiscordSettings]):
    name = "discord"
    settings_class = DiscordSettings
    enabling_setting = "DISCORD_BOT_TOKEN"
    setup = SetupSpec(
        flags=(
            SetupFlag("--token", "Discord bot token"),
            SetupFlag("--api-base-url", "Discord REST API base (a local test server)"),
        ),
        collect=collect,
        enabling=("DISCORD_BOT_TOKEN",),
        guide="docs/how-to/discord.md",
    )

    def enabled(self, settings: DiscordSettings, core: Settings) -> bool:
        return settings.discord_bot_token is not None

    def create(
        self, settings: DiscordSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # the platform's client library only when a gateway builds the adapter
        from adapters.discord.adapter import DiscordAdapter, DiscordConfig

        return DiscordAdapter(DiscordConfig.from_settings(settings))


plugin = DiscordPlugin()
