"""``gateway schedule add|list|remove|run``: schedules from the command line, as an operator
(``remove`` takes any schedule). ``run`` fires one now; a running ``gateway run`` answers it
(its turn workers poll the sessions)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gateway.core.settings import Settings
from gateway.schedules.command import describe
from gateway.schedules.service import OPERATOR, ScheduleService
from gateway.schedules.shape import ScheduleOut


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedule = sub.add_parser("schedule", help="scheduled turns: add, list, remove, run")
    ssub = schedule.add_subparsers(dest="schedule_command", required=True)
    add = ssub.add_parser("add", help="ask PROMPT in PLACE at a time or on a cron expression")
    add.add_argument("place", metavar="PLACE", help="platform:scope:chat[:thread]")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", metavar="WHEN", help='one-shot: "2026-12-04 09:00" (in --tz)')
    when.add_argument("--cron", metavar="EXPR", help='cron expression: "0 9 * * 1-5"')
    add.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
    add.add_argument("--prompt", required=True, metavar="TEXT")
    add.add_argument("--name", metavar="N")
    add.add_argument("--owner", default=OPERATOR, help="platform:scope:user_id (default operator)")
    lst = ssub.add_parser("list", help="schedules with their next and last firing")
    lst.add_argument("--json", action="store_true")
    rm = ssub.add_parser("remove", help="remove a schedule (any: this is an operator's)")
    rm.add_argument("schedule_id", metavar="ID", type=int)
    run = ssub.add_parser("run", help="fire a schedule now")
    run.add_argument("schedule_id", metavar="ID", type=int)


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.core.lifecycle.database import database
    from gateway.core.registry import target_of_place
    from session_store.migrator import migrate
    from session_store.repos.schedules import Schedules
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            service = ScheduleService(Schedules(store.db), targets=target_of_place)
            return await _command(service, args)
        finally:
            await store.close()


async def _command(service: ScheduleService, args: argparse.Namespace) -> int:
    command = args.schedule_command
    if command == "add":
        made = await service.create(
            args.place,
            prompt=args.prompt,
            owner=args.owner,
            at=args.at,
            cron=args.cron,
            tz=args.tz,
            name=args.name,
        )
        print(f"{made.place} {describe(made)}")
        return 0
    if command == "list":
        found = await service.listing()
        if args.json:
            rows: list[dict[str, Any]] = [ScheduleOut.of(s).model_dump(mode="json") for s in found]
            print(json.dumps(rows, indent=2))
        else:
            for s in found:
                print(f"{s.place} {describe(s)}")
            if not found:
                print("no schedules", file=sys.stderr)
        return 0
    if command == "remove":
        removed = await service.cancel(args.schedule_id)
        print(f"removed schedule #{removed.id}")
        return 0
    fired = await service.run(args.schedule_id)
    print(f"fired schedule #{args.schedule_id}: session {fired.session_id}, seq {fired.seq_no}")
    return 0
