"""Mattermost as a surface plugin: its settings, ``gateway setup mattermost``, the adapter."""

from __future__ import annotations

import argparse

from adapters.mattermost.extract import answer_settings
from adapters.mattermost.settings import MattermostSettings
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.plugins import Prompter, SetupFlag, SetupSpec, Shorthand, SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings ``gateway setup mattermost`` writes, from flags first, then prompts."""
    return {
        "MATTERMOST_URL": args.url
        or prompter.ask(
            "Server URL (the address you open Mattermost at): ",
            setting="MATTERMOST_URL",
            flag="--url",
            secret=False,
        ),
        "MATTERMOST_TOKEN": args.token
        or prompter.ask(
            "Bot access token (not shown): ",
            setting="MATTERMOST_TOKEN",
            flag="--token",
            secret=True,
        ),
    }


class MattermostPlugin(SurfacePlugin[MattermostSettings]):
    name = "mattermost"
    settings_class = MattermostSettings
    enabling_setting = "MATTERMOST_URL"
    webhook_prefixes = ("/mattermost/",)
    setup = SetupSpec(
        flags=(
            SetupFlag("--url", "Mattermost server URL"),
            SetupFlag("--token", "Mattermost access token"),
        ),
        collect=collect,
        enabling=("MATTERMOST_URL", "MATTERMOST_TOKEN"),
        guide="docs/how-to/mattermost.md",
    )

    def enabled(self, settings: MattermostSettings, core: Settings) -> bool:
        return bool(settings.mattermost_url)

    def create(
        self, settings: MattermostSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # the platform's client library only when a gateway builds the adapter
        from adapters.mattermost.adapter import MattermostAdapter, MattermostConfig

        return MattermostAdapter(MattermostConfig.from_settings(settings))

    def answer_settings(self, settings: MattermostSettings) -> Shorthand:
        return answer_settings(settings)

    def place_target(self, key: SessionKey) -> ReplyTarget:
        """A channel: a root post, or a reply under the root post (``root_id``) that is the
        place's thread."""
        return ReplyTarget(
            platform=key.platform, scope=key.scope, chat_id=key.chat_id, thread_id=key.thread_id
        )


plugin = MattermostPlugin()
