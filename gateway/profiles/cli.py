"""``gateway profiles show PLACE`` / ``gateway profiles check``, and ``gateway reload``.

``check`` and ``show`` read the config file themselves (no database, no running gateway);
``reload`` asks the running gateway to read it again (``POST /api/v1/reload`` on its HTTP
server, with ``GATEWAY_ADMIN_TOKEN`` when one is set).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from typing import Any

from gateway.core.config_file import load_config_file
from gateway.core.settings import Settings
from gateway.profiles.model import Resolved, place_key, resolved_json
from gateway.profiles.service import Profiles, load_book
from gateway.turns.context import ContextPolicy

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    profiles = sub.add_parser("profiles", help="what the assistant is in each place")
    psub = profiles.add_subparsers(dest="profiles_command", required=True)
    show = psub.add_parser(
        "show", help="the profile in force in a place, and the entry choosing it"
    )
    show.add_argument("place", metavar="PLACE", help="platform:scope:chat[:thread]")
    show.add_argument("--json", action="store_true", help="one JSON object")
    psub.add_parser("check", help="check the config file; exit 2 naming every bad entry")
    sub.add_parser("reload", help="make the running gateway read the config file again")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Raises ``ConfigError`` (exit 2) for a bad file."""
    if args.command == "reload":
        return _reload(settings)
    config = load_config_file(settings.gateway_config_file)
    book = load_book(settings, config)
    if args.profiles_command == "check":
        where = settings.gateway_config_file or "(GATEWAY_CONFIG_FILE unset)"
        print(f"{where}: ok, {len(book.profiles)} profiles, {len(book.places)} places")
        return 0
    try:
        key = place_key(args.place)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    profiles = Profiles(book, ContextPolicy.from_settings(settings))
    resolved = profiles.resolve(key)
    if args.json:
        print(json.dumps(resolved_json(args.place, resolved), indent=2))
    else:
        print(show_text(args.place, resolved, profiles.policy_for(resolved.profile), settings))
    return 0


def show_text(place: str, resolved: Resolved, policy: ContextPolicy, settings: Settings) -> str:
    """The effective profile of ``place``, each value with where it comes from."""
    profile, entry = resolved.profile, resolved.entry

    def own(value: Any, setting: str) -> str:
        return "" if value is not None else f"  ({setting})"

    chosen = (
        f'[places] "{entry.text}" = "{entry.profile}"'
        if entry is not None
        else "no [places] entry matches: the built-in default"
    )
    tools = "the tools policy" if profile.tools is None else ", ".join(profile.tools) or "none"
    answer = profile.answer or "mentions, or every message in GATEWAY_ANSWER_ALL_PLACES"
    streaming = settings.gateway_streaming if profile.streaming is None else profile.streaming
    lines = [
        f"place:         {place}",
        f"chosen by:     {chosen}",
        f"profile:       {profile.name}",
        f"system prompt: {policy.system_prompt}"
        + own(profile.system_prompt, "AGENT_SYSTEM_PROMPT"),
        f"model:         {policy.default_model}" + own(profile.model, "AGENT_MODEL"),
        f"models:        {', '.join(policy.allowed)}" + own(profile.models, "AGENT_MODELS"),
        f"tools:         {tools}",
        f"knowledge:     {', '.join(['the thread', 'the chat', *profile.knowledge])}",
        f"answer:        {answer}",
        f"streaming:     {str(streaming).lower()}" + own(profile.streaming, "GATEWAY_STREAMING"),
    ]
    return "\n".join(lines)


def _reload(settings: Settings) -> int:
    host = settings.gateway_http_host
    host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{settings.gateway_http_port}/api/v1/reload"
    request = urllib.request.Request(
        url, method="POST", data=b"{}", headers={"Content-Type": "application/json"}
    )
    token = settings.gateway_admin_token
    if token is not None:
        request.add_header("Authorization", f"Bearer {token.get_secret_value()}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            result = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        print(f"error: {url} answered {exc.code}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: no gateway answered at {url}: {exc}", file=sys.stderr)
        return 1
    if not result.get("reloaded"):
        print(
            f"configuration error: {result.get('error')} (the previous one stays)", file=sys.stderr
        )
        return 2
    print("reloaded")
    return 0
