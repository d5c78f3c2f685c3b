"""Databases on the suite's shared test server (``tests/conftest.py``'s ``pg_server``): one
per test, or per group of tests that share a gateway, made from the migrated template (or
empty) and dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def dsn_for(base: str, database: str) -> str:
    """Same server and credentials, another database (handles ``?host=/socket`` DSNs)."""
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


async def _admin(server: str, statement: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@asynccontextmanager
async def fresh_database(
    server: str, *, prefix: str, template: str | None = None
) -> AsyncIterator[str]:
    """The DSN of a new database named ``<prefix>_<random>``, a copy of ``template`` (no
    schema at all without one); dropped on exit, connections and all."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    await _admin(server, f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    try:
        yield dsn_for(server, name)
    finally:
        await _admin(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
