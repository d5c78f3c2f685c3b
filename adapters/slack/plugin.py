"""Slack as a surface plugin: its settings, ``gateway setup slack``, the adapter."""

from __future__ import annotations

import argparse

from adapters.slack.extract import answer_settings
from adapters.slack.settings import SlackSettings
from gateway.core.domain import ReplyTarget, SessionKey
from gateway.core.errors import ConfigError
from gateway.core.plugins import Prompter, SetupFlag, SetupSpec, Shorthand, SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings ``gateway setup slack`` writes, from flags first, then prompts."""
    values: dict[str, str] = {}
    values["SLACK_BOT_TOKEN"] = args.bot_token or prompter.ask(
        "Bot User OAuth Token, xoxb-... (not shown): ",
        setting="SLACK_BOT_TOKEN",
        flag="--bot-token",
        secret=True,
    )
    mode = args.mode or (
        "socket"
        if args.app_token
        else "events"
        if args.signing_secret
        else prompter.choose("Connect with", ("socket", "events"), "socket")
    )
    if mode == "socket":
        values["SLACK_APP_TOKEN"] = args.app_token or prompter.ask(
            "App-level token with connections:write, xapp-... (not shown): ",
            setting="SLACK_APP_TOKEN",
            flag="--app-token",
            secret=True,
        )
    elif mode == "events":
        values["SLACK_SIGNING_SECRET"] = args.signing_secret or prompter.ask(
            "Signing Secret, from Basic Information (not shown): ",
            setting="SLACK_SIGNING_SECRET",
            flag="--signing-secret",
            secret=True,
        )
    else:
        raise ConfigError("SLACK_APP_TOKEN", "--mode must be socket or events")
    if args.api_base_url:
        values["SLACK_API_BASE_URL"] = args.api_base_url
    return values


class SlackPlugin(SurfacePlugin[SlackSettings]):
    name = "slack"
    settings_class = SlackSettings
    enabling_setting = "SLACK_BOT_TOKEN"
    webhook_prefixes = ("/slack/",)
    setup = SetupSpec(
        flags=(
            SetupFlag("--bot-token", "Slack Bot User OAuth Token (xoxb-)"),
            SetupFlag("--app-token", "Slack app-level token (xapp-): Socket Mode"),
            SetupFlag("--signing-secret", "Slack signing secret: Events API"),
            SetupFlag("--mode", "slack: socket|events (socket)"),
            SetupFlag("--api-base-url", "a non-default Slack Web API server (a fake)"),
        ),
        collect=collect,
        enabling=("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"),
        guide="docs/how-to/slack.md",
    )

    def enabled(self, settings: SlackSettings, core: Settings) -> bool:
        return settings.slack_bot_token is not None

    def create(
        self, settings: SlackSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # the platform's client library only when a gateway builds the adapter
        from adapters.slack.adapter import SlackAdapter

        return SlackAdapter(settings)

    def answer_settings(self, settings: SlackSettings) -> Shorthand:
        return answer_settings(settings)

    def place_target(self, key: SessionKey) -> ReplyTarget:
        """A channel: a root post (no ``thread_ts``), or a reply in the thread whose root
        ``ts`` is the place's thread."""
        return ReplyTarget(
            platform=key.platform, scope=key.scope, chat_id=key.chat_id, thread_id=key.thread_id
        )


plugin = SlackPlugin()
