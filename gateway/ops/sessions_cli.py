"""``gateway sessions``: list, show, and move sessions through their lifecycle (pause,
resume, close, archive) or set their topic, priority and tags."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Coroutine
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gateway.core.domain import SessionKey
from gateway.core.lifecycle.database import database
from gateway.core.settings import Settings
from gateway.core.text import counted

if TYPE_CHECKING:
    from session_store.records import SessionRecord
    from session_store.values import SessionStatus

_SESSION_HELP = "session id or platform:scope:chat:thread"


def positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return number


def add_sessions_parser(sub: Any) -> None:
    """The ``sessions`` command group, added to the command line's subparsers."""
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
    lst.add_argument("--limit", type=positive, default=100, help="at most N sessions")
    lst.add_argument("--json", action="store_true", help="a JSON array instead of lines")
    show = ssub.add_parser("show", help="a session's links and transcript in seq order")
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


def sessions_command(settings: Settings, args: argparse.Namespace) -> Coroutine[Any, Any, int]:
    if args.sessions_command == "list":
        return _sessions_list(settings, args)
    if args.sessions_command in ("pause", "resume", "close", "archive", "set"):
        return _sessions_change(settings, args)
    return _sessions_show(settings, args.ident, args.after, args.limit)


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
    from session_store.repos.operator import OperatorStore
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
            links = (await OperatorStore(store).session_detail(session.id)).links
        finally:
            await store.close()
    count = counted(session.message_count, "message")
    print(f"session {session.id} {session.key} ({session.status}, {count})")
    if session.topic or session.priority or session.tags:
        tags = ", ".join(session.tags) or "-"
        print(f"  topic: {session.topic or '-'} · priority {session.priority} · tags {tags}")
    for link in links:
        target = link.target_ref or link.url or f"session {link.linked_session_id}"
        print(f"  link: {link.relation} {link.link_type or 'session'} {target}")
    for m in messages:
        who = m.sender_name or m.sender_id or m.role
        label = f"{m.role}:{who}" if m.role == "user" else m.role
        if m.kind in ("decision", "rolling"):  # what the history says was decided or folded
            label += f" ({m.kind})"
        print(f"[{m.seq_no}] {label}: {m.content}")
        if m.role == "assistant" and m.metadata.get("profile"):
            print(f"    profile: {m.metadata['profile']}")  # the place's profile that answered
        # tool calls, results and routing
        for line in tool_lines(m.role, m.metadata):
            print(line)
    return 0
