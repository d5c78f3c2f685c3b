"""``gateway usage [--by person|place|model|day] [--since DATE] [--until DATE] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys

from gateway.core.config_file import load_config_file
from gateway.core.settings import Settings
from gateway.usage.config import usage_config
from gateway.usage.report import BY, BadRange, build_report, render_text


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    usage = sub.add_parser(
        "usage", help="spend and tokens from the usage ledger, with each budget and what is left"
    )
    usage.add_argument("--by", choices=BY, default="person", help="group by (default person)")
    usage.add_argument("--since", metavar="DATE", help="first day, YYYY-MM-DD (default: 1st)")
    usage.add_argument("--until", metavar="DATE", help="last day, YYYY-MM-DD (default: today)")
    usage.add_argument("--json", action="store_true", help="a JSON document instead of lines")


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.core.lifecycle.database import database
    from session_store.migrator import migrate
    from session_store.store import Store

    budgets = usage_config(load_config_file(settings.gateway_config_file)).budgets
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            report = await build_report(
                store, budgets, by=args.by, since=args.since, until=args.until
            )
        except BadRange as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            await store.close()
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
    else:
        print(render_text(report))
    return 0
