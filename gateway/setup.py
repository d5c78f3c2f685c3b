"""``gateway setup telegram|slack|mattermost``: ask for the tokens, check them live through the
platform adapter's ``check()`` (getMe / auth.test / users/me), say what the bot can see, and
write or update a ``.env`` file, never echoing a secret.

On a terminal it asks (secrets with ``getpass``: nothing shown while typing). Without one it
takes flags and reads each secret not given as a flag from stdin, one line each, in the order
the prompts would ask, so scripts never put a token on the command line."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gateway.doctor import render
from gateway.errors import ConfigError
from gateway.ports import Check
from gateway.settings import env_file_path, load_settings

Platform = Literal["telegram", "slack", "mattermost"]
PLATFORMS: tuple[Platform, ...] = ("telegram", "slack", "mattermost")
GUIDES: Mapping[Platform, str] = {
    "telegram": "docs/telegram.md",
    "slack": "docs/slack.md",
    "mattermost": "docs/mattermost.md",
}


#: the settings that switch each platform on (cleared for the others while checking one)
_ENABLING: Mapping[Platform, tuple[str, ...]] = {
    "telegram": ("TELEGRAM_BOT_TOKEN",),
    "slack": ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"),
    "mattermost": ("MATTERMOST_URL", "MATTERMOST_TOKEN"),
}


class SetupAborted(Exception):
    """A required answer is missing (stdin ended); the message says which and how to give it."""


@dataclass(frozen=True, slots=True)
class Prompter:
    """Where answers come from: the terminal, or stdin lines when there is none."""

    interactive: bool
    read_line: Callable[[], str]
    ask_visible: Callable[[str], str]
    ask_secret: Callable[[str], str]

    @classmethod
    def from_stdin(cls) -> Prompter:
        return cls(
            interactive=sys.stdin.isatty(),
            read_line=sys.stdin.readline,
            ask_visible=input,
            ask_secret=getpass.getpass,
        )

    def ask(self, prompt: str, *, setting: str, flag: str, secret: bool) -> str:
        if self.interactive:
            while True:
                answer = (self.ask_secret if secret else self.ask_visible)(prompt).strip()
                if answer:
                    return answer
                print(f"{setting} is required.", flush=True)
        line = self.read_line()
        if not line.strip():
            raise SetupAborted(f"{setting}: not given: pass {flag}, or one line on stdin")
        return line.strip()

    def choose(self, prompt: str, options: tuple[str, ...], default: str) -> str:
        """Non-interactive runs take the default (flags choose otherwise)."""
        if not self.interactive:
            return default
        while True:
            answer = self.ask_visible(f"{prompt} [{'/'.join(options)}] ({default}): ").strip()
            if not answer:
                return default
            if answer in options:
                return answer
            print(f"one of: {', '.join(options)}", flush=True)


def collect(platform: Platform, args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings to write for ``platform``, from flags first, then prompts (or stdin)."""
    values: dict[str, str] = {}
    if platform == "telegram":
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
            # required in webhook mode (issue 18); made here so nobody has to invent one
            values["TELEGRAM_WEBHOOK_SECRET"] = args.webhook_secret or secrets.token_hex(32)
        if args.api_base_url:
            values["TELEGRAM_API_BASE_URL"] = args.api_base_url
    elif platform == "slack":
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
    else:
        values["MATTERMOST_URL"] = args.url or prompter.ask(
            "Server URL (the address you open Mattermost at): ",
            setting="MATTERMOST_URL",
            flag="--url",
            secret=False,
        )
        values["MATTERMOST_TOKEN"] = args.token or prompter.ask(
            "Bot access token (not shown): ",
            setting="MATTERMOST_TOKEN",
            flag="--token",
            secret=True,
        )
    return values


async def check_platform(platform: Platform, values: Mapping[str, str]) -> list[Check]:
    """The platform adapter's own ``check()``, on settings made of ``values`` only."""
    from gateway.doctor import check_surfaces

    # only this platform: the others' settings in the environment are not checked here
    others: dict[str, None] = {
        name: None
        for other, names in _ENABLING.items()
        if other != platform
        for name in names
        if name not in values
    }
    settings = load_settings(
        _env_file=None, GATEWAY_WEB_CHAT=False, GATEWAY_ADAPTERS="", **others, **values
    )
    return [
        c
        for c in await check_surfaces(settings)
        if c.name == platform or c.name.startswith(f"{platform} ") or c.name == "surfaces"
    ]


# --- the .env file -----------------------------------------------------------------------------

_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")
_PLAIN = re.compile(r"^[A-Za-z0-9_\-.:/@+,=]*$")


def _quoted(value: str) -> str:
    if _PLAIN.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def update_env_file(path: Path, values: Mapping[str, str], *, comment: str) -> None:
    """Set ``values`` in the dotenv file at ``path``: a key already there is replaced in place
    (every other line is kept as it was), new keys are appended. Written atomically, readable
    by its owner only (it holds secrets)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    pending = dict(values)
    out: list[str] = []
    for line in lines:
        match = _LINE.match(line)
        key = match.group(1) if match else None
        if key is not None and key in values:
            if key in pending:
                out.append(f"{key}={_quoted(pending.pop(key))}")
            # a second assignment of the same key would override ours: drop it
            continue
        out.append(line)
    if pending:
        if out and out[-1].strip():
            out.append("")
        out.append(f"# {comment}")
        out.extend(f"{key}={_quoted(value)}" for key, value in pending.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("\n".join(out) + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- the command --------------------------------------------------------------------------------


async def run_setup(args: argparse.Namespace, prompter: Prompter | None = None) -> int:
    platform: Platform = args.platform
    prompter = prompter or Prompter.from_stdin()
    if prompter.interactive:
        print(f"Setting up {platform} (guide: {GUIDES[platform]}).", flush=True)
    try:
        values = collect(platform, args, prompter)
    except SetupAborted as exc:
        print(f"setup: {exc}", file=sys.stderr)
        return 2
    print(f"Checking {platform}...", flush=True)
    checks = await check_platform(platform, values)
    render(checks)
    identity = [c for c in checks if c.name in (platform, "surfaces")]
    if not identity or not all(c.ok for c in identity):
        print(
            f"Nothing written: fix the above and run `gateway setup {platform}` again.",
            file=sys.stderr,
        )
        return 1
    # the file `gateway run` reads (settings.env_file_path), unless told otherwise
    path = Path(args.env_file) if args.env_file else env_file_path()
    update_env_file(path, values, comment=f"gateway setup {platform}")
    print(f"Wrote {', '.join(values)} to {path}.", flush=True)
    if not all(c.ok for c in checks):
        print(f"Fix the BAD lines above next ({GUIDES[platform]}).", flush=True)
    print("Next: `gateway doctor`, then `gateway run`.", flush=True)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    setup = sub.add_parser(
        "setup",
        help="connect a platform: check its tokens live and write them to .env",
        description=__doc__,
    )
    setup.add_argument("platform", choices=PLATFORMS)
    setup.add_argument(
        "--env-file",
        help="the dotenv file to write (default: the one `gateway run` reads: GATEWAY_ENV_FILE, "
        "else ./.env if there is one, else ~/.config/chat-gateway/.env)",
    )
    setup.add_argument("--token", help="Telegram bot token / Mattermost access token")
    setup.add_argument("--bot-token", help="Slack Bot User OAuth Token (xoxb-)")
    setup.add_argument("--app-token", help="Slack app-level token (xapp-): Socket Mode")
    setup.add_argument("--signing-secret", help="Slack signing secret: Events API")
    setup.add_argument("--url", help="Mattermost server URL")
    setup.add_argument(
        "--mode", help="telegram: polling|webhook (polling); slack: socket|events (socket)"
    )
    setup.add_argument("--webhook-url", help="telegram webhook mode: the public https URL")
    setup.add_argument(
        "--webhook-secret", help="telegram webhook mode: the secret (default: a random one)"
    )
    setup.add_argument(
        "--api-base-url",
        help="a non-default Bot API / Slack Web API server (a local Bot API server, a fake)",
    )
