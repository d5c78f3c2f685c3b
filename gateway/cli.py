"""The ``gateway`` command. Exit codes: 0 success, 2 bad configuration, 1 anything else."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

import structlog

from gateway.domain import SessionKey
from gateway.errors import ConfigError, GatewayError
from gateway.logs import configure_logging
from gateway.settings import Settings, load_settings

log = structlog.get_logger("gateway")


@contextlib.asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[str]:
    """The DSN to use: ``DATABASE_URL``, or the embedded server under GATEWAY_DATA_DIR."""
    if settings.database_url:
        yield settings.database_url
        return
    from session_store.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.gateway_data_dir)
    dsn = await embedded.start()
    # the wheel stops the server at interpreter exit (when we are its last user), after the
    # pool is closed; stopping it here would race a second gateway sharing the data dir
    yield dsn


async def _run(settings: Settings) -> int:
    from gateway.agents import load_agent
    from gateway.runtime import Gateway
    from session_store.migrator import migrate
    from session_store.store import Store

    agent = load_agent(settings.agent, settings)
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, max_size=settings.gateway_db_pool_size)
        try:
            gateway = Gateway(settings, store=store, agent=agent)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await gateway.start()
            print(f"gateway ready: web chat at {gateway.url}", flush=True)
            try:
                await stop.wait()
            finally:
                log.info("gateway_stopping")
                await gateway.stop()
        finally:
            await store.close()
    return 0


async def _migrate(settings: Settings) -> int:
    from session_store.migrator import migrate

    async with database(settings) as dsn:
        applied = await migrate(dsn)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


async def _sessions_list(settings: Settings, platform: str | None, active: bool, limit: int) -> int:
    from session_store.migrator import migrate
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            sessions = await store.list_sessions(
                platform=platform, status="active" if active else None, limit=limit
            )
        finally:
            await store.close()
    for s in sessions:
        last = s.last_message_at.isoformat(timespec="seconds") if s.last_message_at else "-"
        print(f"{s.id}\t{s.key}\t{s.status}\t{s.message_count} messages\t{last}")
    if not sessions:
        print("no sessions", file=sys.stderr)
    return 0


async def _sessions_show(settings: Settings, ident: str, after: int, limit: int) -> int:
    from session_store.migrator import migrate
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            if ident.isdigit():
                session = await store.get_session(int(ident))
            else:
                try:
                    key = SessionKey.parse(ident)
                except ValueError as exc:
                    print(str(exc), file=sys.stderr)
                    return 1
                found = await store.find_session(key)
                if found is None:
                    print(f"no session for key {ident}", file=sys.stderr)
                    return 1
                session = found
            messages = await store.delta(session.id, after, limit)
        finally:
            await store.close()
    print(
        f"session {session.id} {session.key} ({session.status}, {session.message_count} messages)"
    )
    for m in messages:
        who = m.sender_name or m.sender_id or m.role
        label = f"{m.role}:{who}" if m.role == "user" else m.role
        print(f"[{m.seq_no}] {label}: {m.content}")
    return 0


async def _doctor(settings: Settings) -> int:
    from gateway.doctor import run_doctor

    return await run_doctor(settings)


async def _mcp(settings: Settings) -> int:
    from gateway.mcp_tools import serve_stdio

    async with database(settings) as dsn:
        return await serve_stdio(settings, dsn)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="migrate, then serve every configured surface until stopped")
    sub.add_parser("migrate", help="apply pending migrations and exit")
    sessions = sub.add_parser("sessions", help="inspect sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    lst = ssub.add_parser("list", help="one line per session")
    lst.add_argument("--platform")
    lst.add_argument("--active", action="store_true")
    lst.add_argument("--limit", type=int, default=100)
    show = ssub.add_parser("show", help="a session's transcript in seq order")
    show.add_argument("ident", metavar="ID-or-KEY", help="session id or platform:scope:chat:thread")
    show.add_argument("--after", type=int, default=0)
    show.add_argument("--limit", type=int, default=1000)
    sub.add_parser("doctor", help="check configuration, database and platform credentials")
    sub.add_parser("mcp", help="serve the MCP session tools over stdio (logs go to stderr)")
    # knowledge base (issue 15): gateway kb add|list|remove|search
    from gateway.knowledge.commands import add_parser as add_kb_parser

    add_kb_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.gateway_log_format, settings.gateway_log_level)
    try:
        if args.command == "run":
            coro = _run(settings)
        elif args.command == "migrate":
            coro = _migrate(settings)
        elif args.command == "doctor":
            coro = _doctor(settings)
        elif args.command == "mcp":
            coro = _mcp(settings)
        elif args.command == "kb":  # knowledge base (issue 15)
            from gateway.knowledge.commands import run as run_kb

            coro = run_kb(settings, args)
        elif args.sessions_command == "list":
            coro = _sessions_list(settings, args.platform, args.active, args.limit)
        else:
            coro = _sessions_show(settings, args.ident, args.after, args.limit)
        return _run_coro(coro)
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except GatewayError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run_coro(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows)
        return asyncio.run(coro)
    return uvloop.run(coro)


if __name__ == "__main__":
    sys.exit(main())
