"""``gateway retention show|run [--json]``: the retention policy and what it would remove now,
or one run now (what the loop does every interval on one replica), with the counts."""

from __future__ import annotations

import argparse
import json
import sys

from gateway.core.config_file import load_config_file
from gateway.core.settings import Settings
from gateway.retention.policy import retention_policy
from gateway.retention.service import KINDS, Report, Retention


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    retention = sub.add_parser(
        "retention", help="what is kept how long, and what is past it: show it, or drop it now"
    )
    rsub = retention.add_subparsers(dest="retention_command", required=True)
    show = rsub.add_parser("show", help="the policy and what a run would remove now")
    show.add_argument("--json", action="store_true", help="a JSON document instead of lines")
    run = rsub.add_parser("run", help="remove what is past the policy now; print the counts")
    run.add_argument("--json", action="store_true", help="a JSON document instead of lines")


def render(retention: Retention, report: Report, *, done: bool) -> str:
    policy = retention.policy
    windows = {
        "payloads": f"{policy.payload_days} days",
        "dead_letters": f"{policy.dead_letter_days} days",
        "keys": f"{policy.dedupe_days} days",
        "closed_sessions": f"{policy.closed_session_months} months",
        "usage": f"{policy.usage_days} days",
    }
    verb = "removed" if done else "to remove"
    lines = [f"retention at {report.at.isoformat(timespec='seconds')} (0: kept forever)"]
    for kind in KINDS:
        window = windows[kind]
        kept = "kept forever" if window.startswith("0 ") else f"kept {window}"
        lines.append(f"  {kind:<16} {kept:<22} {verb}: {report.counts.get(kind, 0)}")
    inbox = policy.inbox_days()
    lines.append(
        f"  {'inbox months':<16} "
        f"{'kept forever' if inbox == 0 else f'dropped after {inbox} days':<22} "
        f"audit months: {'kept forever' if policy.audit_days == 0 else f'{policy.audit_days} days'}"
    )
    lines.append(f"  partitions {verb}: {', '.join(report.partitions) or 'none'}")
    if policy.closed_session_months:
        lines.append(f"  closed sessions are exported to {policy.export_dir}")
    lines += [f"  error in {step}: {error}" for step, error in report.errors.items()]
    return "\n".join(lines)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.core.lifecycle.database import database
    from session_store.migrator import migrate
    from session_store.store import Store

    policy = retention_policy(settings, load_config_file(settings.gateway_config_file))
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            retention = Retention(store.db, policy)
            done = args.retention_command == "run"
            report = await (retention.once() if done else retention.plan())
        finally:
            await store.close()
    if args.json:
        print(json.dumps({"policy": policy.as_dict(), **report.as_json()}, indent=2))
    else:
        print(render(retention, report, done=done))
    if report.errors:
        print(f"error: {len(report.errors)} step(s) failed", file=sys.stderr)
        return 1
    return 0
