"""``gateway people list | show PERSON | link ACCOUNT ACCOUNT | unlink ACCOUNT |
export PERSON [--out DIR] | forget PERSON [--yes]``.

A person is written ``person:ID`` or as any of its accounts (``platform:scope:user_id``,
web ``web:local:NAME``, Matrix ``matrix:example.org:@ann:example.org``). ``link`` refuses an
account on a platform no surface serves (exit 2, naming it)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Collection
from pathlib import Path

from gateway import audit
from gateway.core.domain import split_account
from gateway.core.places import KnownPlaces, UnknownPlatform
from gateway.core.settings import Settings
from gateway.knowledge.files import S3Files, build_files
from gateway.people.erasure import DEFAULT_BATCH, forget, resume_of, start
from gateway.people.export import EXPORT_FILE, export
from session_store.repos.erasure import ErasureStore
from session_store.repos.places import PlacesSeen
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
    export = psub.add_parser("export", help="write all of a person's data (JSON and files)")
    export.add_argument("person", metavar="PERSON", help="person:ID or one of its accounts")
    export.add_argument("--out", metavar="DIR", type=Path, help="default: ./person-ID")
    forget = psub.add_parser(
        "forget", help="erase a person on every platform (resumable: run again to finish)"
    )
    forget.add_argument("person", metavar="PERSON", help="person:ID or one of its accounts")
    forget.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    forget.add_argument(
        "--batch", type=int, default=DEFAULT_BATCH, metavar="N", help="rows per transaction"
    )
    forget.add_argument(
        "--max-batches", type=int, metavar="N", help="stop after N batches (run again to go on)"
    )


def _account(text: str) -> str:
    """``text`` if it is an account (a Matrix one ``matrix:example.org:@ann:example.org``)."""
    split_account(text)  # ValueError otherwise
    return text


async def _person(store: Store, text: str) -> int:
    if text.startswith("person:") and text[7:].isdigit():
        return int(text[7:])
    return await store.people.person_of(_account(text))


async def _known(store: Store, text: str) -> int:
    """The person ``text`` names, which must be one of its own (not merged, not forgotten)."""
    person = await _person(store, text)
    if not await ErasureStore(store.db).exists(person):
        raise ValueError(f"no person:{person} (forgotten, or merged into another)")
    return person


async def _export(store: Store, args: argparse.Namespace, files: S3Files | None) -> int:
    person = await _known(store, args.person)
    out: Path = args.out or Path(f"person-{person}")
    data = await export(store, person, out, files=files)
    counts = {k: len(data[k]) for k in ("messages", "files", "usage", "schedules")}
    # what was exported, never its text
    await audit.record(store, "people.export", ("person", person), details=counts)
    print(
        f"person:{person}\t{out / EXPORT_FILE}\t" + ", ".join(f"{v} {k}" for k, v in counts.items())
    )
    return 0


async def _confirmed(person: int, accounts: tuple[str, ...]) -> bool:
    if not sys.stdin.isatty():
        raise ValueError("forget needs --yes when not asked on a terminal")
    answer = await asyncio.to_thread(
        input, f"Erase person:{person} ({', '.join(accounts) or 'no accounts'})? [y/N] "
    )
    return answer.strip().lower() in ("y", "yes")


async def _forget(store: Store, args: argparse.Namespace, files: S3Files | None) -> int:
    # an erasure killed half way is found by any of its accounts (the person may be gone)
    job = None if args.person.startswith("person:") else await resume_of(store, args.person)
    person = job.person_id if job else await _known(store, args.person)
    accounts = job.who.accounts if job else await store.people.accounts(person)
    if not args.yes and not await _confirmed(person, accounts):
        print("nothing erased", file=sys.stderr)
        return 1
    job = job or await start(store, person)
    done = await forget(store, job, batch=args.batch, max_batches=args.max_batches, files=files)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(done.counts.items()) if v)
    if not done.finished:
        print(
            f"person:{done.person_id}\tnot finished ({counts}); run forget again", file=sys.stderr
        )
        return 1
    print(f"person:{done.person_id}\tforgotten\t{counts}")
    return 0


async def _command(
    store: Store, args: argparse.Namespace, settings: Settings, known: KnownPlaces
) -> int:
    people = store.people
    if args.people_command == "export":
        return await _export(store, args, build_files(settings))
    if args.people_command == "forget":
        return await _forget(store, args, build_files(settings))
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
        for account in (_account(args.first), _account(args.second)):
            await known.check_account(account)
        person = await people.link(args.first, args.second)
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


async def run(
    settings: Settings, args: argparse.Namespace, *, platforms: Collection[str] = ()
) -> int:
    """``platforms``: the installed surfaces' (an account on another platform the gateway
    never saw is refused with exit 2)."""
    from gateway.core.lifecycle.database import database
    from session_store.migrator import migrate

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        known = KnownPlaces(lambda: platforms, PlacesSeen(store.db))
        try:
            with audit.acting(audit.cli_actor(), surface="cli"):
                return await _command(store, args, settings, known)
        except UnknownPlatform as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            await store.close()
