"""Matrix as a surface plugin: its settings, ``gateway setup matrix``, the adapter."""

from __future__ import annotations

import argparse

from adapters.matrix.settings import MatrixSettings
from gateway.core.plugins import Prompter, SetupFlag, SetupSpec, SurfacePlugin
from gateway.core.ports import AdapterContext, PlatformAdapter
from gateway.core.settings import Settings

PLATFORM = "matrix"


def collect(args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings ``gateway setup matrix`` writes, from flags first, then prompts."""
    return {
        "MATRIX_HOMESERVER_URL": args.homeserver
        or prompter.ask(
            "Homeserver URL (https://matrix.example.org): ",
            setting="MATRIX_HOMESERVER_URL",
            flag="--homeserver",
            secret=False,
        ),
        "MATRIX_ACCESS_TOKEN": args.token
        or prompter.ask(
            "The bot account's access token (not shown): ",
            setting="MATRIX_ACCESS_TOKEN",
            flag="--token",
            secret=True,
        ),
    }


class MatrixPlugin(SurfacePlugin[MatrixSettings]):
    name = PLATFORM
    settings_class = MatrixSettings
    enabling_setting = "MATRIX_HOMESERVER_URL"
    setup = SetupSpec(
        flags=(
            SetupFlag("--homeserver", "Matrix homeserver URL"),
            SetupFlag("--token", "Matrix access token"),
        ),
        collect=collect,
        enabling=("MATRIX_HOMESERVER_URL", "MATRIX_ACCESS_TOKEN"),
        guide="docs/how-to/matrix.md",
    )

    def enabled(self, settings: MatrixSettings, core: Settings) -> bool:
        return bool(settings.matrix_homeserver_url)

    def create(
        self, settings: MatrixSettings, core: Settings, context: AdapterContext
    ) -> PlatformAdapter:
        # mautrix only when a gateway builds the adapter
        from adapters.matrix.adapter import MatrixAdapter, MatrixConfig

        return MatrixAdapter(MatrixConfig.from_settings(settings))


plugin = MatrixPlugin()
