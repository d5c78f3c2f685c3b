"""``gateway profiles show PLACE`` / ``gateway profiles check``, and ``gateway reload``.

``check`` and ``show`` read the config file themselves (no database, no running gateway);
``reload`` asks every running replica to read it again, through the database they share
(``gateway.profiles.reload``), and prints each one's report: the file and its SHA-256, or why
it kept its previous config. Exit 2 when a replica runs without a config file, with another
file than this command's ``GATEWAY_CONFIG_FILE``, or could not load it; 1 when no replica
answered.
"""

from __future__ import annotations

import argparse
import json
import sys
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
    reload = sub.add_parser("reload", help="make every running replica read the config file again")
    reload.add_argument("--json", action="store_true", help="one JSON object")


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Raises ``ConfigError`` (exit 2) for a bad file."""
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


async def reload(settings: Settings, args: argparse.Namespace) -> int:
    """``gateway reload``: every live replica, through the database."""
    from gateway.core.lifecycle.database import database
    from gateway.profiles.reload import NO_REPLICA, describe, request_reload, status
    from session_store.migrator import migrate
    from session_store.repos.reloads import Reloads
    from session_store.store import Store

    path = settings.gateway_config_file
    meant = str(path.absolute()) if path is not None else None
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            outcome = await request_reload(Reloads(store.db), path=meant)
        finally:
            await store.close()
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2))
    else:
        for r in outcome.reports:
            where = f"{r.host}:{r.pid}" if r.host else "?"
            print(f"replica {r.process_id} ({where})\t{status(r)}\t{describe(r)}")
    if not outcome.reports:
        print(f"error: {NO_REPLICA} (nothing to reload)", file=sys.stderr)
        return 1
    if not outcome.ok:
        failed = [r for r in outcome.reports if r.outcome == "failed"]
        for line in outcome.failures():
            print(f"error: {line}", file=sys.stderr)
        # a file the replicas cannot use (or none) is a configuration error
        return 2 if failed else 1
    return 0
