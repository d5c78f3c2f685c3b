"""The ``gateway`` command. Exit codes: 0 success, 2 bad configuration, 1 anything else."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from importlib import metadata
from typing import TYPE_CHECKING, Any, NoReturn

import structlog

from gateway.core.domain import SessionKey
from gateway.core.errors import ConfigError, GatewayError
from gateway.core.lifecycle.database import database
from gateway.core.logs import configure_logging
from gateway.core.registry import load_checked_settings
from gateway.core.settings import Settings, settings_source
from gateway.core.text import counted

if TYPE_CHECKING:
    from gateway.agents.base import Agent
    from session_store.records import SessionRecord
    from session_store.values import SessionStatus

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


async def _sessions_list(settings: Settings, args: argparse.Namespace) -> int:
    from session_store.migrator import migrate
    from session_store.store import Store

    status: SessionStatus | None = "active" if args.active else args.status
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            sessions = await store.sessions.list_sessions(
                platform=args.platform,
                status=status,
                topic_contains=args.topic,
                min_priority=args.min_priority,
                tags=args.tag,
                limit=args.limit,
            )
        finally:
            await store.close()
    if args.json:
        # one JSON array, newest activity first, for scripts (`jq`)
        print(json.dumps([_session_json(s) for s in sessions], indent=2))
        return 0
    for s in sessions:
        last = s.last_message_at.isoformat(timespec="seconds") if s.last_message_at else "-"
        about = "".join(
            [
                f"\ttopic: {s.topic}" if s.topic else "",
                f"\tpriority {s.priority}" if s.priority else "",
                f"\ttags: {','.join(s.tags)}" if s.tags else "",
            ]
        )
        count = counted(s.message_count, "message")
        print(f"{s.id}\t{s.key}\t{s.status}\t{count}\t{last}{about}")
    if not sessions:
        print("no sessions", file=sys.stderr)
    return 0


async def _sessions_change(settings: Settings, args: argparse.Namespace) -> int:
    """``gateway sessions pause|resume|close|archive|set SESSION``: one lifecycle step, or
    the topic, priority and tags; a step the status does not allow exits 1 saying why."""
    from gateway import audit
    from session_store.errors import RequestError
    from session_store.migrator import migrate
    from session_store.store import Store

    step = args.sessions_command
    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            found = await _find_session(store, args.ident)
            if found is None:
                return 1
            try:
                if step == "set":
                    tags = None if args.tags is None else args.tags.split(",")
                    details = {"topic": args.topic, "priority": args.priority, "tags": tags}
                    async with audit.attempt(
                        store, "session.update", ("session", found.id), details=details
                    ):
                        session = await store.sessions.set_attributes(
                            found.id, topic=args.topic, priority=args.priority, tags=tags
                        )
                else:
                    async with audit.attempt(store, f"session.{step}", ("session", found.id)):
                        session = await store.sessions.transition(found.id, step)
            except RequestError as exc:
                print(str(exc), file=sys.stderr)
                return 1
        finally:
            await store.close()
    about = f"topic {session.topic!r}, priority {session.priority}, tags {list(session.tags)}"
    print(f"session {session.id} {session.key}: {session.status}; {about}")
    return 0


async def _find_session(store: Any, ident: str) -> SessionRecord | None:
    """A session by id or key, or None after saying why on stderr."""
    from session_store.errors import SessionNotFound

    if ident.isascii() and ident.isdigit():
        try:
            return await store.sessions.get_session(int(ident))  # type: ignore[no-any-return]
        except SessionNotFound:
            print(f"no session {ident}", file=sys.stderr)
            return None
    try:
        key = SessionKey.parse(ident)
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return None
    found = await store.sessions.find_session(key)
    if found is None:
        print(f"no session for key {ident}", file=sys.stderr)
    return found  # type: ignore[no-any-return]


def _session_json(s: SessionRecord) -> dict[str, Any]:
    def when(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": s.id,
        "key": str(s.key),
        "platform": s.key.platform,
        "scope": s.key.scope,
        "chat_id": s.key.chat_id,
        "thread_id": s.key.thread_id,
        "status": s.status,
        "title": s.title,
        "topic": s.topic,
        "priority": s.priority,
        "tags": list(s.tags),
        "message_count": s.message_count,
        "created_at": when(s.created_at),
        "last_message_at": when(s.last_message_at),
    }


async def _sessions_show(settings: Settings, ident: str, after: int, limit: int) -> int:
    from gateway.tools.display import tool_lines
    from session_store.migrator import migrate
    from session_store.store import Store

    async with database(settings) as dsn:
        await migrate(dsn)
        store = await Store.connect(dsn, min_size=1, max_size=2)
        try:
            if ident.isascii() and ident.isdigit():
                session = await store.sessions.get_session(int(ident))
            else:
                try:
                    key = SessionKey.parse(ident)
                except ValueError as exc:
                    print(str(exc), file=sys.stderr)
                    return 1
                found = await store.sessions.find_session(key)
                if found is None:
                    print(f"no session for key {ident}", file=sys.stderr)
                    return 1
                session = found
            messages = await store.sessions.delta(session.id, after, limit)
        finally:
            await store.close()
    count = counted(session.message_count, "message")
    print(f"session {session.id} {session.key} ({session.status}, {count})")
    for m in messages:
        who = m.sender_name or m.sender_id or m.role
        label = f"{m.role}:{who}" if m.role == "user" else m.role
        print(f"[{m.seq_no}] {label}: {m.content}")
        if m.role == "assistant" and m.metadata.get("profile"):
            print(f"    profile: {m.metadata['profile']}")  # the place's profile that answered
        # tool calls, results and routing
        for line in tool_lines(m.role, m.metadata):
            print(line)
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


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


_SESSION_HELP = "session id or platform:scope:chat:thread"


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
    sessions = sub.add_parser("sessions", help="inspect sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    lst = ssub.add_parser("list", help="one line per session")
    lst.add_argument("--platform")
    lst.add_argument("--active", action="store_true", help="only active sessions")
    lst.add_argument("--status", choices=["active", "paused", "closed", "archived"])
    lst.add_argument("--topic", help="text in the topic (case-insensitive)")
    lst.add_argument("--min-priority", type=int, help="priority at least N")
    lst.add_argument(
        "--tag", action="append", help="sessions carrying this tag (repeat: all of them)"
    )
    lst.add_argument("--limit", type=_positive, default=100, help="at most N sessions")
    lst.add_argument("--json", action="store_true", help="a JSON array instead of lines")
    show = ssub.add_parser("show", help="a session's transcript in seq order")
    show.add_argument("ident", metavar="ID-or-KEY", help="session id or platform:scope:chat:thread")
    show.add_argument("--after", type=int, default=0)
    show.add_argument("--limit", type=int, default=1000)
    for step, text in (
        ("pause", "pause an active session: messages are kept, nothing is answered"),
        ("resume", "resume a paused session: what arrived meanwhile is answered"),
        ("close", "close an active or paused session (its thread's next message opens a new one)"),
        ("archive", "archive a closed session: read-only"),
    ):
        move = ssub.add_parser(step, help=text)
        move.add_argument(
            "ident", metavar="SESSION", help="session id or platform:scope:chat:thread"
        )
    change = ssub.add_parser("set", help="set a session's topic, priority or tags")
    change.add_argument("ident", metavar="SESSION", help=_SESSION_HELP)
    change.add_argument("--topic")
    change.add_argument("--priority", type=int)
    change.add_argument("--tags", help="comma-separated; replaces the session's tags ('' clears)")
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
    return parser


#: commands whose changes are recorded in the audit log as done by hand
_BY_HAND = frozenset({"users", "kb", "reload", "sessions"})


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
        if args.command == "run":
            coro = _run(settings)
        elif args.command == "migrate":
            coro = _migrate(settings)
        elif args.command == "doctor":
            coro = _doctor(settings)
        elif args.command == "mcp":
            coro = _mcp(settings)
        elif args.command == "users":
            coro = _users(settings, args.users_command, getattr(args, "name", None))
        elif args.command == "kb":  # knowledge base
            from gateway.ops.kb import run as run_kb

            coro = run_kb(settings, args)
        elif args.command == "profiles":  # no database, no event loop
            from gateway.profiles.cli import run as run_profiles

            return run_profiles(settings, args)
        elif args.command == "reload":
            from gateway.profiles.cli import reload

            coro = reload(settings, args)
        elif args.command == "people":
            from gateway.people.cli import run as run_people

            coro = run_people(settings, args)
        elif args.command == "usage":
            from gateway.usage.cli import run as run_usage

            coro = run_usage(settings, args)
        elif args.command == "schedule":
            from gateway.schedules.cli import run as run_schedule

            coro = run_schedule(settings, args)
        elif args.command == "audit":
            from gateway.audit.cli import run as run_audit

            coro = run_audit(settings, args)
        elif args.command == "retention":
            from gateway.retention.cli import run as run_retention

            coro = run_retention(settings, args)
        elif args.sessions_command == "list":
            coro = _sessions_list(settings, args)
        elif args.sessions_command in ("pause", "resume", "close", "archive", "set"):
            coro = _sessions_change(settings, args)
        else:
            coro = _sessions_show(settings, args.ident, args.after, args.limit)
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
