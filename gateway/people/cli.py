"""``gateway people list | show PERSON | link ACCOUNT ACCOUNT | unlink ACCOUNT``.

A person is written ``person:ID`` or as any of its accounts (``platform:scope:user_id``,
web ``web:local:NAME``)."""

from __future__ import annotations

import argparse
import sys

from gateway import audit
from gateway.core.settings import Settings
from session_store.store import Store


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    people = sub.add_parser("people", help="people and the platform accounts that are one person")
    psub = people.add_subparsers(dest="people_command", required=True)
    psub.add_parser("list", help="one line per person with their accounts")
    show = psub.add_parser("show", help="a person's accounts")
    show.add_argument("person", metavar="PERSON", help="person:ID or one of its accounts")
    link = psub.add_parser("link", help="make two accounts (and everyone linked) one person")
    link.add_argument("first", metavar="ACCOUNT")
    link.add_argument("second", metavar="ACCOUNT")
    unlink = psub.add_parser("unlink", help="make an account a person of its own")
    unlink.add_argument("account", metavar="ACCOUNT")


def _account(text: str) -> str:
    if text.count(":") < 2:
        raise ValueError(f"not an account (platform:scope:user_id): {text!r}")
    return text


async def _person(store: Store, text: str) -> int:
    if text.startswith("person:") and text[7:].isdigit():
        return int(text[7:])
    return await store.people.person_of(_account(text))


async def _command(store: Store, args: argparse.Namespace) -> int:
    people = store.people
    if args.people_command == "list":
        found = await people.list_people()
        for p in found:
            print(f"person:{p.id}\t{', '.join(p.accounts)}")
        if not found:
            print("no people yet", file=sys.stderr)
        return 0
    if args.people_command == "show":
        person = await _person(store, args.person)
        accounts = await people.accounts(person)
        print(f"person:{person}")
        for account in accounts:
            print(f"  {account}")
        return 0 if accounts else 1
    if args.people_command == "link":
        person = await people.link(_account(args.first), _account(args.second))
        await audit.record(
            store,
            "people.link",
            ("person", person),
            details={"accounts": [args.first, args.second]},
        )
        print(f"person:{person}\t{', '.join(await people.accounts(person))}")
        return 0
    person = await people.unlink(_account(args.account))
    await audit.record(
        store, "people.unlink", ("person", person), details={"account": args.account}
    )
    print(f"{args.account} is person:{person}")
    return 0


async def run(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.ops.database import database
    from session_store.migrator import migrate

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            with audit.acting(audit.cli_actor(), surface="cli"):
                return await _command(store, args)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            await store.close()
