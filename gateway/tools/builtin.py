"""The built-in tools and their default policy entries (the tools file may override them).

All read-only, all scoped to the asker: this thread's history, the sessions the asker takes
part in (never anyone else's), the knowledge bases this thread may read (the same retriever
and scopes as the passages a turn gets), and the time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gateway.core.domain import SessionKey
from gateway.knowledge.numbering import PassageNumbers
from gateway.knowledge.retrieval import KnowledgeSearch
from gateway.tools.catalog import Tool, ToolCaller, ToolHandler, ToolPolicy, ToolSpec
from session_store.repos.knowledge import PassageHit
from session_store.repos.operator import OperatorStore
from session_store.repos.tools import ToolStore
from session_store.store import Store


class ToolInputError(ValueError):
    """Arguments the model got wrong: returned to it as the tool's result."""


def _int(args: Mapping[str, Any], name: str, default: int, *, lo: int, hi: int) -> int:
    value = args.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolInputError(f"{name} must be an integer")
    return max(lo, min(hi, value))


def _text(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolInputError(f"{name} must be a non-empty string")
    return value.strip()


DEFAULT_POLICIES: dict[str, ToolPolicy] = {
    "search_thread": ToolPolicy(
        name="search_thread",
        domains=("history",),
        operation="read",
        risk="low",
        aliases=("earlier", "search", "find", "what did", "mentioned", "said before"),
        priority=70,
        source="default",
    ),
    "list_my_sessions": ToolPolicy(
        name="list_my_sessions",
        domains=("sessions",),
        operation="read",
        risk="low",
        aliases=("other threads", "my threads", "my sessions", "other topics", "conversations"),
        priority=60,
        source="default",
    ),
    "read_session": ToolPolicy(
        name="read_session",
        domains=("sessions",),
        operation="read",
        risk="low",
        aliases=("other thread", "that thread", "other topic", "that session"),
        priority=55,
        source="default",
    ),
    "search_knowledge": ToolPolicy(
        name="search_knowledge",
        domains=("knowledge",),
        operation="read",
        risk="low",
        aliases=(
            "document",
            "documents",
            "the docs",
            "handbook",
            "policy",
            "manual",
            "knowledge base",
            "according to",
            "look up",
        ),
        priority=65,
        source="default",
    ),
    "current_time": ToolPolicy(
        name="current_time",
        domains=("time",),
        operation="read",
        risk="low",
        aliases=("time", "date", "today", "now", "clock", "what day"),
        priority=40,
        source="default",
    ),
}


BUILTIN_SPECS: dict[str, ToolSpec] = {
    "search_thread": ToolSpec(
        name="search_thread",
        description="Full-text search of this thread's earlier messages.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "words to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
        },
    ),
    "list_my_sessions": ToolSpec(
        name="list_my_sessions",
        description="The asker's own conversations (threads/topics they wrote in).",
        parameters={
            "type": "object",
            "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 50}},
        },
    ),
    "read_session": ToolSpec(
        name="read_session",
        description="The latest messages of another conversation the asker takes part in.",
        parameters={
            "type": "object",
            "properties": {
                "session_id": {"type": "integer"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            },
            "required": ["session_id"],
        },
    ),
    "search_knowledge": ToolSpec(
        name="search_knowledge",
        description=(
            "Search the documents shared with this thread, this chat's and the default "
            "knowledge base; returns passages with their document, page and section, each "
            "with the number to cite it by in the answer (cite_as, like [6])."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 10},
            },
            "required": ["query"],
        },
    ),
    "current_time": ToolSpec(
        name="current_time",
        description="The current date and time, optionally in an IANA timezone.",
        parameters={
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "e.g. UTC"}},
        },
    ),
}


def knowledge_result(hits: Sequence[PassageHit], numbers: PassageNumbers | None) -> str:
    """``search_knowledge``'s result: each passage under the number the answer cites it by
    (the turn's one numbering, after the passages the turn was given); without a turn's
    numbering (no answer to cite in) the passages carry no number."""
    rows: list[dict[str, Any]] = []
    for h in hits:
        row: dict[str, Any] = {}
        if numbers is not None:
            n = numbers.number(h)
            row["n"] = n
            row["cite_as"] = f"[{n}]"
        row.update(
            document=h.document_name,
            page=h.page,
            section=h.section or None,
            text=h.content,
            score=round(h.score, 4),
        )
        rows.append(row)
    return json.dumps(rows, ensure_ascii=False)


def builtin_tools(store: Store, *, knowledge: KnowledgeSearch | None = None) -> list[Tool]:
    """The built-in tools; ``search_knowledge`` only where a knowledge base is served."""
    tools_store = ToolStore(store)
    ops = OperatorStore(store)

    async def search_thread(args: Mapping[str, Any], caller: ToolCaller) -> str:
        query = _text(args, "query")
        limit = _int(args, "limit", 8, lo=1, hi=20)
        hits = await ops.search(query, session_id=caller.session_id, limit=limit)
        return json.dumps(
            [
                {"seq": h.seq_no, "role": h.role, "sender": h.sender_name, "text": h.snippet}
                for h in hits
            ],
            ensure_ascii=False,
        )

    async def list_my_sessions(args: Mapping[str, Any], caller: ToolCaller) -> str:
        if caller.user_id is None:
            return "[]"
        limit = _int(args, "limit", 10, lo=1, hi=50)
        found = await tools_store.asker_sessions(
            platform=caller.platform, scope=caller.scope, user_id=caller.user_id, limit=limit
        )
        return json.dumps(
            [
                {
                    "session_id": s.id,
                    "title": s.title,
                    "chat": s.key.chat_id,
                    "thread": s.key.thread_id,
                    "status": s.status,
                    "messages": s.message_count,
                    "this_thread": s.id == caller.session_id,
                    "last_message_at": s.last_message_at.isoformat() if s.last_message_at else None,
                }
                for s in found
            ],
            ensure_ascii=False,
        )

    async def read_session(args: Mapping[str, Any], caller: ToolCaller) -> str:
        session_id = args.get("session_id")
        if not isinstance(session_id, int) or isinstance(session_id, bool):
            raise ToolInputError("session_id must be an integer")
        limit = _int(args, "limit", 20, lo=1, hi=50)
        # only sessions the asker takes part in: the same answer for "not yours" and "no
        # such session", so ids cannot be probed
        if caller.user_id is None or not await tools_store.takes_part(
            session_id, platform=caller.platform, scope=caller.scope, user_id=caller.user_id
        ):
            raise ToolInputError(f"no session {session_id} that you take part in")
        messages = await store.sessions.recent(session_id, limit)
        return json.dumps(
            [
                {"seq": m.seq_no, "role": m.role, "sender": m.sender_name, "text": m.content}
                for m in messages
                if m.role in ("user", "assistant") and m.content
            ],
            ensure_ascii=False,
        )

    handlers: dict[str, ToolHandler] = {
        "search_thread": search_thread,
        "list_my_sessions": list_my_sessions,
        "read_session": read_session,
        "current_time": current_time,
    }
    if knowledge is not None:
        handlers["search_knowledge"] = _search_knowledge(knowledge)
    return [Tool(spec=BUILTIN_SPECS[n], handler=h) for n, h in handlers.items()]


async def current_time(args: Mapping[str, Any], caller: ToolCaller) -> str:
    zone = args.get("timezone") or "UTC"
    if not isinstance(zone, str):
        raise ToolInputError("timezone must be a string")
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolInputError(f"unknown timezone {zone!r}") from exc
    now = datetime.now(UTC).astimezone(tz)
    return json.dumps({"timezone": zone, "now": now.isoformat(), "weekday": now.strftime("%A")})


def _search_knowledge(knowledge: KnowledgeSearch) -> ToolHandler:
    """``search_knowledge``: passages of the knowledge bases the caller's place may read."""

    async def search_knowledge(args: Mapping[str, Any], caller: ToolCaller) -> str:
        query = _text(args, "query")
        limit = _int(args, "limit", 5, lo=1, hi=10)
        key = SessionKey(
            platform=caller.platform,
            scope=caller.scope,
            chat_id=caller.chat_id,
            thread_id=caller.thread_id,
        )
        found = await knowledge.search_in(key, query, limit=limit)
        return knowledge_result(found.hits, caller.passages)

    return search_knowledge
