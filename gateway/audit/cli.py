"""``gateway audit [--since WHEN] [--until WHEN] [--actor A] [--action A] [--limit N] [--json]``:
the audit log, newest first."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.core.settings import Settings
from session_store.repos.audit import AuditEvent, AuditStore

_AGO = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def when(text: str) -> datetime:
    """``2026-01-31``, ``2026-01-31T12:00:00Z`` (no zone: UTC), or an age: ``30m``,
    ``12h``, ``7d``."""
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return datetime.now(UTC) - timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            "a date (2026-01-31), a time (2026-01-31T12:00Z) or an age (30m, 12h, 7d)"
        ) from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser("audit", help="the audit log: who did what, newest first")
    audit.add_argument("--since", type=when, help="from: a date, a time, or an age (7d)")
    audit.add_argument("--until", type=when, help="before: a date, a time, or an age")
    audit.add_argument("--actor", help="exactly: admin:token, web:ann, cli:root…")
    audit.add_argument("--action", help="an action or a dotted prefix: kb, web.sign_in")
    audit.add_argument("--limit", type=int, default=100, help="at most N events")
    audit.add_argument(
        "--json", action="store_true", help="a JSON array instead of lines ([] when none match)"
    )


def as_json(e: AuditEvent) -> dict[str, Any]:
    return {
        "id": e.id,
        "at": e.at.isoformat(),
        "actor": e.actor,
        "action": e.action,
        "object_type": e.object_type,
        "object_id": e.object_id,
        "outcome": e.outcome,
        "reason": e.reason,
        "remote_addr": e.remote_addr,
        "surface": e.surface,
        "details": e.details,
    }


def line(e: AuditEvent) -> str:
    obj = f"{e.object_type}:{e.object_id}" if e.object_type else "-"
    outcome = e.outcome if e.reason is None else f"{e.outcome} ({e.reason})"
    origin = e.surface if e.remote_addr is None else f"{e.surface}@{e.remote_addr}"
    return "\t".join([e.at.isoformat(timespec="seconds"), e.actor, e.action, obj, outcome, origin])


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.core.lifecycle.database import database
    from session_store.migrator import migrate
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            events = await AuditStore(store.db).page(
                since=args.since,
                until=args.until,
                actor=args.actor,
                action=args.action,
                limit=max(1, args.limit),
            )
        finally:
            await store.close()
    if args.json:
        # one JSON array, newest first, as `gateway sessions list --json`: `[]` when nothing
        # matched, so a script's `jq` reads the same shape either way
        print(json.dumps([as_json(e) for e in events], indent=2))
        return 0
    for e in events:
        print(line(e))
    if not events:
        print("no audit events", file=sys.stderr)
    return 0
