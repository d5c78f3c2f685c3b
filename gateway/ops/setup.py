"""``gateway setup <surface>``: ask for the tokens, check them live through the surface
plugin's checks (the adapter's ``check()``), say what the bot can see, and write or update a
``.env`` file, never echoing a secret. Each surface plugin brings its flags, prompts and the
settings they write (``SetupSpec``).

On a terminal it asks (secrets with ``getpass``: nothing shown while typing). Without one it
takes flags and reads each secret not given as a flag from stdin, one line each, in the order
the prompts would ask, so scripts never put a token on the command line."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.core.plugins import SetupSpec
from gateway.core.ports import Check
from gateway.core.registry import check_settings, surface_plugins
from gateway.core.settings import env_file_path, load_settings
from gateway.ops.doctor import render


def setups() -> dict[str, SetupSpec]:
    """``{surface name: its setup}`` of every installed surface that has one."""
    return {p.name: p.setup for p in surface_plugins() if p.setup is not None}


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


def collect(platform: str, args: argparse.Namespace, prompter: Prompter) -> dict[str, str]:
    """The settings to write for ``platform``, from flags first, then prompts (or stdin): its
    plugin's ``SetupSpec.collect``."""
    return setups()[platform].collect(args, prompter)


async def check_platform(platform: str, values: Mapping[str, str]) -> list[Check]:
    """The platform adapter's own checks, on settings made of ``values`` only."""
    from gateway.ops.doctor import check_surfaces

    # only this platform: the others' settings in the environment are not checked here
    others: dict[str, None] = {
        name: None
        for other, spec in setups().items()
        if other != platform
        for name in spec.enabling
        if name not in values
    }
    settings = check_settings(
        load_settings(
            _env_file=None, GATEWAY_WEB_CHAT=False, GATEWAY_ADAPTERS="", **others, **values
        )
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
    platform: str = args.platform
    guide = setups()[platform].guide
    prompter = prompter or Prompter.from_stdin()
    if prompter.interactive:
        print(f"Setting up {platform} (guide: {guide}).", flush=True)
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
    write_files = setups()[platform].write_files
    if write_files is not None:
        for written in write_files(dict(values), path.parent):
            print(f"Wrote {written}.", flush=True)
    if not all(c.ok for c in checks):
        print(f"Fix the BAD lines above next ({guide}).", flush=True)
    print("Next: `gateway doctor`, then `gateway run`.", flush=True)
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    setup = sub.add_parser(
        "setup",
        help="connect a platform: check its tokens live and write them to .env",
        description=(
            "Ask for a platform's tokens, check them live, say what the bot can see, and write "
            "or update the .env file, never echoing a secret. On a terminal it asks (nothing "
            "shown while typing a secret); without one it takes the flags and reads each secret "
            "not given as a flag from stdin, one line each, in the order the prompts would ask."
        ),
    )
    setup.add_argument("platform", choices=list(setups()))
    setup.add_argument(
        "--env-file",
        help="the dotenv file to write (default: the one 'gateway run' reads: GATEWAY_ENV_FILE, "
        "else ./.env if there is one, else ~/.config/chat-gateway/.env)",
    )
    for flag, helps in _flags().items():
        setup.add_argument(flag, help=" / ".join(helps))


def _flags() -> dict[str, list[str]]:
    """Every surface's setup flags; a flag two surfaces share gets both helps."""
    flags: dict[str, list[str]] = {}
    for spec in setups().values():
        for one in spec.flags:
            flags.setdefault(one.flag, []).append(one.help)
    return flags
