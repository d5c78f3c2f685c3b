"""The ``gateway`` command. Exit codes: 0 success, 2 bad configuration, 1 anything else."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn

import structlog

from gateway.core.errors import ConfigError, GatewayError
from gateway.core.lifecycle.database import database
from gateway.core.logs import configure_logging
from gateway.core.registry import known_platforms, load_checked_settings
from gateway.core.settings import Settings, settings_source
from gateway.ops.sessions_cli import add_sessions_parser, sessions_command

if TYPE_CHECKING:
    from gateway.agents.base import Agent

log = structlog.get_logger("gateway")
#: what ``gateway --help`` says first (plain text: help shows no reStructuredText)
DESCRIPTION = "The gateway command. Exit codes: 0 success, 2 bad configuration, 1 anything else."


async def _run(settings: Settings) -> int:
    from gateway.agents.loading import load_agent

    agent = load_agent(settings.agent, settings)
    # a bad config file (profiles, places, tools sections) or tools file stops start-up
    # (exit 2) before the database is started
    from gateway.profiles.service import load_book

    load_book(settings)
    from gateway.core import tracing

    # OTEL_* asking for traces without the otel extra installed stops start-up too (exit 2)
    if tracing.configure():
        log.info("tracing_on")
    try:
        return await _serve(settings, agent)
    finally:
        tracing.shutdown()  # the spans still buffered are exported before the process ends


async def _serve(settings: Settings, agent: Agent) -> int:
    from gateway.runtime.gateway import Gateway
    from session_store.migrator import migrate
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, max_size=settings.gateway_db_pool_size)
        try:
            gateway = Gateway(settings, store=store, agent=agent)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            on_hangup(loop, stop, gateway.reload_config)
            loop.add_signal_handler(signal.SIGUSR1, gateway.reload_config)
            await gateway.start()
            freeze_start_up_heap()
            data = "DATABASE_URL" if settings.database_url else str(settings.gateway_data_dir)
            print(f"settings from {settings_source()}; data in {data}", flush=True)
            print(f"gateway ready: web chat at {gateway.url}", flush=True)
            try:
                await stop.wait()
            finally:
                log.info("gateway_stopping")
                await gateway.stop()
        finally:
            await store.close()
    return 0


def freeze_start_up_heap() -> None:
    """What start-up made (modules, settings, clients, pools: about 200,000 objects tracked by
    the collector) lives as long as the process: collect once, then leave it out of every
    later collection (``gc.freeze``). A full (generation 2) collection walks every tracked
    object with the event loop stopped, so each one held all messages in flight: the slow
    tail of the end-to-end benchmark. Frozen, a full collection walks only what serving made
    since (in the idle process just after start: 120-137 ms of CPU unfrozen, 0.06-0.3 ms
    frozen; docs/explanation/performance.md)."""
    gc.collect()
    gc.freeze()
    log.info("start_up_heap_frozen", objects=gc.get_freeze_count())


def on_hangup(
    loop: asyncio.AbstractEventLoop, stop: asyncio.Event, reload: Callable[[], object]
) -> None:
    """SIGHUP means two things. A run with no terminal (a service: systemd's
    ``ExecReload=kill -HUP $MAINPID``) reads the config file again. A foreground run on a
    terminal stops, since its terminal went away (window closed, SSH session dropped):
    ``stop_on_hangup``. SIGUSR1 reloads in both cases."""
    if any(os.isatty(fd) for fd in (0, 1, 2)):
        stop_on_hangup(loop, stop)
    else:
        loop.add_signal_handler(signal.SIGHUP, reload)


def stop_on_hangup(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    """SIGHUP: the terminal of a foreground run went away (its window closed, an SSH session
    dropped). Stop as on SIGTERM: drain, close the pool, stop the embedded PostgreSQL. What
    was written to that terminal goes to /dev/null from then on: a write to a hung-up
    terminal fails (EIO), and the drain must not die of its own log lines."""
    on_terminal = [fd for fd in (1, 2) if os.isatty(fd)]

    def hung_up() -> None:
        stop.set()
        if on_terminal:  # first: the log line below must not go to the dead terminal
            devnull = os.open(os.devnull, os.O_WRONLY)
            for fd in on_terminal:
                os.dup2(devnull, fd)
            os.close(devnull)
        log.info("gateway_terminal_hangup")

    loop.add_signal_handler(signal.SIGHUP, hung_up)


async def _migrate(settings: Settings) -> int:
    from session_store.migrator import migrate

    async with database(settings) as dsn:
        applied = await migrate(dsn)
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


# --- web chat accounts -------------------------------------------------------------


def _read_password() -> str:
    """From the terminal (asked twice), or the first line of stdin when it is not one."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    import getpass

    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise ConfigError("password", "the two passwords differ")
    return first


async def _users(settings: Settings, command: str, name: str | None) -> int:
    from gateway import audit
    from gateway.http.webauth import MIN_PASSWORD, hash_password, valid_name
    from session_store.migrator import migrate
    from session_store.repos.accounts import AccountStore
    from session_store.store import Store

    if name is not None and not valid_name(name):
        print("a name is 1-64 letters, digits, '.', '_', '@', '+' or '-'", file=sys.stderr)
        return 1
    password_hash = None
    if command == "add":
        password = _read_password()
        if len(password) < MIN_PASSWORD:
            print(f"the password must be at least {MIN_PASSWORD} characters", file=sys.stderr)
            return 1
        password_hash = await asyncio.to_thread(hash_password, password)
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            accounts = AccountStore(store.db)
            if command == "add":
                assert name is not None and password_hash is not None
                existed = await accounts.get(name) is not None
                await accounts.add(name, password_hash)
                action = "web.account.password" if existed else "web.account.add"
                await audit.record(store, action, ("web.account", name))
                print(f"{name}: saved (signed out everywhere)")
            elif command == "remove":
                assert name is not None
                if not await accounts.remove(name):
                    await audit.record(
                        store,
                        "web.account.remove",
                        ("web.account", name),
                        outcome="failed",
                        reason="no such account",
                    )
                    print(f"no account {name}", file=sys.stderr)
                    return 1
                await audit.record(store, "web.account.remove", ("web.account", name))
                print(f"{name}: removed")
            else:
                for account in await accounts.list():
                    print(f"{account.name}\t{account.created_at.isoformat(timespec='seconds')}")
        finally:
            await store.close()
    if settings.gateway_web_auth != "accounts" and command == "add":
        print("note: accounts are used when GATEWAY_WEB_AUTH=accounts", file=sys.stderr)
    return 0


async def _doctor(settings: Settings) -> int:
    from gateway.ops.doctor import run_doctor

    return await run_doctor(settings)


async def _mcp(settings: Settings) -> int:
    from gateway.runtime.mcp import serve_stdio

    async with database(settings) as dsn:
        return await serve_stdio(settings, dsn)


class _Parser(argparse.ArgumentParser):
    """A command group run without its subcommand (``gateway profiles``) prints its help, not
    argparse's "the following arguments are required: profiles_command" (exit 2 as before).
    Every subparser is of this class too (argparse makes them of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        groups = [
            a.dest
            for a in self._actions
            if isinstance(a, argparse._SubParsersAction) and a.required and a.dest
        ]
        if any(message == f"the following arguments are required: {g}" for g in groups):
            self.print_help(sys.stderr)
            self.exit(2)
        super().error(message)


def _version() -> str:
    try:
        return metadata.version("chat-gateway")
    except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, never installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    # typed as the base class: the subcommand modules add theirs to ArgumentParser groups
    parser: argparse.ArgumentParser = _Parser(prog="gateway", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gateway {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="migrate, then serve every configured surface until stopped")
    sub.add_parser("migrate", help="apply pending migrations and exit")
    add_sessions_parser(sub)
    users = sub.add_parser("users", help="web chat accounts (GATEWAY_WEB_AUTH=accounts)")
    usub = users.add_subparsers(dest="users_command", required=True)
    add = usub.add_parser("add", help="add an account, or set its password (stdin if piped)")
    add.add_argument("name")
    usub.add_parser("list", help="one line per account")
    remove = usub.add_parser("remove", help="remove an account (signs it out)")
    remove.add_argument("name")
    sub.add_parser("doctor", help="check configuration, database and platform credentials")
    sub.add_parser(
        "mcp", help="serve the MCP tools over stdio, the same as /mcp (logs go to stderr)"
    )
    from gateway.ops.setup import add_parser as add_setup_parser

    add_setup_parser(sub)  # gateway setup <surface>: each surface plugin brings its own

    # knowledge base: gateway kb add|list|remove|search
    from gateway.ops.kb import add_parser as add_kb_parser

    add_kb_parser(sub)
    # profiles: gateway profiles show|check, gateway reload
    from gateway.profiles.cli import add_parser as add_profiles_parser

    add_profiles_parser(sub)
    # people and usage: gateway people list|show|link|unlink, gateway usage
    from gateway.people.cli import add_parser as add_people_parser
    from gateway.usage.cli import add_parser as add_usage_parser

    add_people_parser(sub)
    add_usage_parser(sub)
    # schedules: gateway schedule add|list|remove|run
    from gateway.schedules.cli import add_parser as add_schedule_parser

    add_schedule_parser(sub)
    # the audit log: gateway audit [--since] [--json]
    from gateway.audit.cli import add_parser as add_audit_parser

    add_audit_parser(sub)
    # retention: gateway retention show|run
    from gateway.retention.cli import add_parser as add_retention_parser

    add_retention_parser(sub)
    # the database: gateway backup FILE, gateway restore FILE
    from gateway.ops.backup import add_parser as add_backup_parser

    add_backup_parser(sub)
    return parser


#: commands whose changes are recorded in the audit log as done by hand
_BY_HAND = frozenset({"users", "kb", "reload", "schedule", "sessions"})


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "setup":
        # before load_settings: setup is how a half-configured .env gets fixed
        return _setup(args)
    try:
        # each surface's own settings too: a bad one is named like a core one (exit 2)
        settings = load_checked_settings()
    except ConfigError as exc:
        if args.command == "doctor":  # doctor reports it like every other finding, with a fix
            from gateway.ops.doctor import config_failure, render

            render([config_failure(exc)])
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    _logging_for(args.command, settings)
    try:
        coro = _command(settings, args)
        if isinstance(coro, int):  # answered without an event loop
            return coro
        if args.command in _BY_HAND:
            # changes made from the command line are recorded as the operating-system user
            from gateway import audit

            with audit.acting(audit.cli_actor(), surface="cli"):
                return _run_coro(coro)
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


def _command(settings: Settings, args: argparse.Namespace) -> Coroutine[Any, Any, int] | int:
    """The command's work: a coroutine for the event loop, or its exit code when it needs
    none."""
    if args.command == "run":
        return _run(settings)
    elif args.command == "migrate":
        return _migrate(settings)
    elif args.command == "doctor":
        return _doctor(settings)
    elif args.command == "mcp":
        return _mcp(settings)
    elif args.command == "users":
        return _users(settings, args.users_command, getattr(args, "name", None))
    elif args.command == "kb":  # knowledge base
        from gateway.ops.kb import run as run_kb

        return run_kb(settings, args)
    elif args.command == "profiles":  # no database, no event loop
        from gateway.profiles.cli import run as run_profiles

        return run_profiles(settings, args)
    elif args.command == "reload":
        from gateway.profiles.cli import reload

        return reload(settings, args)
    elif args.command == "people":
        from gateway.people.cli import run as run_people

        return run_people(settings, args, platforms=known_platforms())
    elif args.command == "usage":
        from gateway.usage.cli import run as run_usage

        return run_usage(settings, args)
    elif args.command == "schedule":
        from gateway.schedules.cli import run as run_schedule

        return run_schedule(settings, args, platforms=known_platforms())
    elif args.command == "audit":
        from gateway.audit.cli import run as run_audit

        return run_audit(settings, args)
    elif args.command in ("backup", "restore"):
        from gateway.ops.backup import run as run_backup

        return run_backup(settings, args)
    elif args.command == "retention":
        from gateway.retention.cli import run as run_retention

        return run_retention(settings, args)
    return sessions_command(settings, args)


#: commands that serve until stopped: they log as configured (JSON off a terminal)
_SERVERS = frozenset({"run", "mcp"})


def _logging_for(command: str, settings: Settings) -> None:
    """A server logs as configured. Any other command is run by a person (or a script that
    reads its output): its stderr carries warnings and errors in words, and no JSON lines,
    unless GATEWAY_LOG_FORMAT or GATEWAY_LOG_LEVEL asks for them."""
    if command in _SERVERS:
        configure_logging(settings.gateway_log_format, settings.gateway_log_level)
        return
    chosen = settings.model_fields_set
    configure_logging(
        settings.gateway_log_format if "gateway_log_format" in chosen else "console",
        settings.gateway_log_level if "gateway_log_level" in chosen else "warning",
        cache=False,
    )


def _setup(args: argparse.Namespace) -> int:
    from gateway.ops.setup import run_setup

    # platform clients log at info; the person at the prompt wants the checks, not the logs
    configure_logging("console", "warning")
    try:
        return _run_coro(run_setup(args))
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nsetup: interrupted, nothing written", file=sys.stderr)
        return 1


def _run_coro(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (not on Windows)
        return asyncio.run(coro)
    return uvloop.run(coro)


if __name__ == "__main__":
    sys.exit(main())
