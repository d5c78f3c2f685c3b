"""Microsoft Teams as a surface plugin: its settings, ``gateway setup teams`` (the settings
and an app package to upload), the adapter."""

from __future__ import annotations

import argparse

from adapters.teams.extract import PLATFORM
from adapters.teams.manifest import write_package
from adapters.teams.settings import TeamsSettings
from gateway.core.plugins import Prompter, SetupFlag, SetupSpec, SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings ``gateway setup teams`` writes, from flags first, then prompts."""
    values: dict[str, str] = {}
    values["TEAMS_APP_ID"] = args.app_id or prompter.ask(
        "Microsoft App ID of the Azure Bot: ",
        setting="TEAMS_APP_ID",
        flag="--app-id",
        secret=False,
    )
    values["TEAMS_APP_PASSWORD"] = args.app_password or prompter.ask(
        "Client secret of the app registration (not shown): ",
        setting="TEAMS_APP_PASSWORD",
        flag="--app-password",
        secret=True,
    )
    if args.tenant_id:
        values["TEAMS_TENANT_ID"] = args.tenant_id
    if args.token_url:
        values["TEAMS_TOKEN_URL"] = args.token_url
    if args.openid_metadata_url:
        values["TEAMS_OPENID_METADATA_URL"] = args.openid_metadata_url
    return values


class TeamsPlugin(SurfacePlugin[TeamsSettings]):
    name = PLATFORM
    settings_class = TeamsSettings
    enabling_setting = "TEAMS_APP_ID"
    # Bot Framework signs with a JWT, checked by the adapter
    webhook_prefixes = ("/teams/",)
    setup = SetupSpec(
        flags=(
            SetupFlag("--app-id", "Teams: the Azure Bot's Microsoft App ID"),
            SetupFlag("--app-password", "Teams: the app registration's client secret"),
            SetupFlag("--tenant-id", "Teams: the tenant of a single-tenant bot"),
            SetupFlag("--token-url", "Teams: a non-default token endpoint (a fake)"),
            SetupFlag("--openid-metadata-url", "Teams: a non-default OpenID metadata URL"),
        ),
        collect=collect,
        enabling=("TEAMS_APP_ID", "TEAMS_APP_PASSWORD"),
        guide="docs/how-to/teams.md",
        write_files=write_package,
    )

    def enabled(self, settings: TeamsSettings, core: Settings) -> bool:
        return settings.teams_app_id is not None

    def create(
        self, settings: TeamsSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # the SDK only when a gateway builds the adapter
        from adapters.teams.adapter import TeamsAdapter

        return TeamsAdapter(settings)


plugin = TeamsPlugin()
