"""One person's data, read for an export and erased in bounded, resumable batches (see
``erasure.sql``; the steps are run by ``gateway.people.erasure``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from session_store.db import Database
from session_store.sql import load
from session_store.values import split_account

SQL = load(__package__, "erasure.sql")


@dataclass(frozen=True, slots=True)
class Who:
    """A person's accounts (``platform:scope:user_id``; the scope and the user id may each
    hold ``:``, ``split_account``), split the way the queries match them."""

    accounts: tuple[str, ...]
    people: tuple[int, ...]

    @property
    def platforms(self) -> list[str]:
        return [split_account(a)[0] for a in self.accounts]

    @property
    def scopes(self) -> list[str]:
        return [split_account(a)[1] for a in self.accounts]

    @property
    def user_ids(self) -> list[str]:
        return [split_account(a)[2] for a in self.accounts]

    @property
    def web_names(self) -> list[str]:
        return [a.removeprefix("web:local:") for a in self.accounts if a.startswith("web:local:")]

    @property
    def subjects(self) -> list[str]:
        """Who a budget notice names: ``person:ID`` or an account."""
        return [f"person:{p}" for p in self.people] + list(self.accounts)

    def match(self) -> tuple[list[str], list[str], list[str], list[str]]:
        """``$1..$4`` of the statements that find their messages."""
        return self.platforms, self.scopes, self.user_ids, list(self.accounts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    id: int
    person_id: int
    who: Who
    step: str
    position: int
    documents: tuple[int, ...]
    counts: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedFile:
    message_id: int
    name: str | None
    kind: str | None
    document_id: int | None
    held_file_id: int | None


class ErasureStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # --- the job ---------------------------------------------------------------------------

    async def exists(self, person_id: int) -> bool:
        """A person of its own (not merged into another, not forgotten)."""
        async with self.db.connection() as conn:
            return bool(await conn.fetchval(SQL.person_exists, person_id))

    async def people_of(self, person_id: int) -> tuple[int, ...]:
        """The person and everyone merged into it."""
        async with self.db.connection() as conn:
            found = await conn.fetchval(SQL.their_people, person_id)
        return tuple(found or (person_id,))

    async def open_job(self, person_id: int, who: Who) -> Job:
        """The unfinished erasure of this person (or of one of its accounts), else a new one."""
        async with self.db.connection() as conn:
            job_id = await conn.fetchval(
                SQL.open_job, person_id, list(who.people), list(who.accounts)
            )
        if job_id is None:  # another run made it at the same moment: take that one
            return await self.open_job(person_id, who)
        return await self.job(job_id)

    async def open_job_of(self, account: str) -> Job | None:
        async with self.db.connection() as conn:
            job_id = await conn.fetchval(SQL.open_job_of, account)
        return None if job_id is None else await self.job(job_id)

    async def job(self, job_id: int) -> Job:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.job, job_id)
        assert row is not None
        return Job(
            id=row["id"],
            person_id=row["person_id"],
            who=Who(tuple(row["accounts"]), tuple(row["people"])),
            step=row["step"],
            position=row["position"],
            documents=tuple(row["documents"]),
            counts={k: int(v) for k, v in row["counts"].items()},
        )

    async def advance(self, job_id: int, step: str, counts: dict[str, int]) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.advance, job_id, step, counts)

    async def save_counts(self, job_id: int, counts: dict[str, int]) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.save_counts, job_id, counts)

    async def finish(self, conn: asyncpg.Connection, job_id: int) -> None:
        await conn.execute(SQL.finish_job, job_id)

    async def last_id(self, table: str) -> int:
        """The newest id of ``messages``, ``inbound_events`` or ``usage_ledger``: where a
        scan ends."""
        query = {
            "messages": SQL.last_message_id,
            "inbound_events": SQL.last_inbound_id,
            "usage_ledger": SQL.last_ledger_id,
        }[table]
        async with self.db.connection() as conn:
            return int(await conn.fetchval(query))

    # --- the batches -----------------------------------------------------------------------

    async def erase_payloads(self, job: Job, low: int, high: int) -> int:
        who = job.who
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.erase_payloads, who.platforms, who.user_ids, low, high, job.id
            )
        assert row is not None
        return int(row["payloads"])

    async def erase_messages(self, job: Job, low: int, high: int) -> dict[str, int]:
        """Their messages in ``(low, high]``, and what carries the same words, in one
        transaction that also moves the job on (documents found are added to it)."""
        async with self.db.transaction() as conn:
            files = await _shared_files(conn, job.who, low, high)
            held = sorted({f.held_file_id for f in files if f.held_file_id is not None})
            docs = sorted({f.document_id for f in files if f.document_id is not None})
            row = await conn.fetchrow(
                SQL.erase_messages, *job.who.match(), low, high, job.id, held, docs
            )
        assert row is not None and row["job"] == 1
        names = ("messages", "payloads", "edits", "summaries", "held_files", "traces")
        return {k: int(row[k]) for k in names}

    async def erase_ledger(self, job: Job, low: int, high: int) -> int:
        who = job.who
        async with self.db.connection() as conn:
            row = await conn.fetchrow(
                SQL.erase_ledger, list(who.accounts), list(who.people), low, high, job.id
            )
        assert row is not None
        return int(row["ledger_rows"])

    async def erase_citations(self, documents: Sequence[int]) -> int:
        async with self.db.connection() as conn:
            status = await conn.execute(SQL.erase_citations, list(documents))
        return int(str(status).rsplit(" ", 1)[1])

    async def drop_unused_terms(self) -> None:
        async with self.db.connection() as conn:
            await conn.execute(SQL.drop_unused_terms)

    async def erase_identity(self, conn: asyncpg.Connection, who: Who) -> dict[str, int]:
        """Everything left that names them, in the caller's transaction: schedules, approval
        arguments, feedback, model choices, budget notices, link codes, web accounts (with
        their single sign-on subjects), accounts and people."""
        accounts = list(who.accounts)
        done: dict[str, int] = {}

        async def run(name: str, query: str, *args: Any) -> None:
            status = await conn.execute(query, *args)
            done[name] = int(str(status).rsplit(" ", 1)[1])

        await run("schedules", SQL.erase_schedules, accounts)
        await run("approvals", SQL.erase_approvals, [f"{p}:{u}" for p, u in _pairs(who)])
        await run("feedback", SQL.erase_feedback, who.platforms, who.scopes, who.user_ids)
        await run("model_choices", SQL.erase_model_choices, who.platforms, who.user_ids,
                  list(who.people))  # fmt: skip
        await run("budget_notices", SQL.erase_notices, who.subjects)
        await run("link_codes", SQL.erase_link_codes, accounts)
        await run("web_accounts", SQL.erase_web_accounts, who.web_names)
        row = await conn.fetchrow(SQL.erase_people, list(who.people), accounts)
        assert row is not None
        done["accounts"] = int(row["accounts"])
        await run("people", SQL.delete_people, list(who.people))
        return done

    # --- reads for an export ---------------------------------------------------------------

    async def messages(self, who: Who, low: int, high: int) -> list[dict[str, Any]]:
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL.their_messages, *who.match(), low, high)
        return [dict(r) for r in rows]

    async def shared_files(self, who: Who, low: int, high: int) -> list[SharedFile]:
        async with self.db.connection() as conn:
            return await _shared_files(conn, who, low, high)

    async def rows(self, name: str, *args: Any) -> list[dict[str, Any]]:
        """The rows of one of the export's reads: ``ledger_rows``, ``schedules``,
        ``audit_events``, ``web_accounts``."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(SQL[name], *args)
        return [dict(r) for r in rows]

    async def document(self, document_id: int) -> dict[str, Any] | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.document, document_id)
        return None if row is None else dict(row)

    async def held_file(self, file_id: int) -> dict[str, Any] | None:
        async with self.db.connection() as conn:
            row = await conn.fetchrow(SQL.held_file, file_id)
        return None if row is None else dict(row)


def _pairs(who: Who) -> list[tuple[str, str]]:
    return list(zip(who.platforms, who.user_ids, strict=True))


async def _shared_files(
    conn: asyncpg.Connection, who: Who, low: int, high: int
) -> list[SharedFile]:
    rows = await conn.fetch(SQL.shared_files, *who.match(), low, high)
    return [
        SharedFile(
            message_id=r["message_id"],
            name=r["name"],
            kind=r["kind"],
            document_id=r["document_id"],
            held_file_id=r["held_file_id"],
        )
        for r in rows
    ]
