"""The MCP session tools: the fast path for other agents to follow and take part in a session.

Every tool maps straight onto the session tables through ``OperatorService`` (the same layer
as the admin API): read the delta after a seq, search, append as a named participant
(optionally delivered to the session's own thread through the outbox), checkpoints,
summaries, artifacts, links, close, and a per-participant read cursor. Served at ``/mcp``
(streamable HTTP, see ``gateway.http.admin``) and by ``gateway mcp`` over stdio.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import structlog
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field
from pydantic_core import to_jsonable_python

from gateway import audit
from gateway.core.commands import decision_text
from gateway.core.domain import SessionKey
from gateway.core.errors import GatewayError
from gateway.core.registry import target_of_place
from gateway.http.operator import OperatorService
from session_store.records import MessageRecord, SessionRecord
from session_store.repos.operator import LinkRelation, LinkType
from session_store.values import MessageKind, SessionStatus

log = structlog.get_logger(__name__)

SessionRef = Annotated[
    Annotated[int, Field(ge=1, lt=2**63)] | Annotated[str, Field(min_length=1, max_length=600)],
    Field(
        description="session id (42) or key platform:scope:chat:thread ('-' for no thread); "
        "a key means the active session of that place, else its newest closed one",
    ),
]
ParticipantName = Annotated[
    str,
    Field(
        description="who is acting: a stable name for this agent or person",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}$",
    ),
]
Seq = Annotated[int, Field(ge=1, lt=2**63)]
CheckpointStatus = Literal["open", "in_progress", "blocked", "done", "cancelled"]
Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\s,]+$")]


class BatchItem(BaseModel):
    """One message of a batch append."""

    content: Annotated[str, Field(min_length=1, max_length=20_000)]
    role: Literal["assistant", "user", "system"] = "assistant"
    model: Annotated[str | None, Field(max_length=128)] = None


INSTRUCTIONS = (
    "Sessions of a chat gateway: each is one conversation place (a Slack thread, a Telegram "
    "topic, a web chat thread) with an append-only transcript numbered by seq_no. Follow a "
    "session with get_session_delta(after_seq=the last seq you saw), take part with "
    "append_session_message (deliver=true sends it to the thread) or append_session_messages "
    "(a batch), keep your place with mark_read, open a place with create_session, and read "
    "its summaries, checkpoints, artifacts and participants with the get_session_* tools."
)


@contextlib.contextmanager
def _as_tool_error() -> Iterator[None]:
    """Our errors become tool errors the model can read (unknown session, closed session,
    seq out of range); anything else is a crash the SDK reports without details."""
    try:
        yield
    except GatewayError as exc:
        raise ToolError(str(exc)) from exc


def _json(value: Any) -> Any:
    return to_jsonable_python(value)


def _message(m: MessageRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seq_no": m.seq_no,
        "role": m.role,
        "sender": m.sender_name or m.sender_id,
        "content": m.content,
        "created_at": m.created_at.isoformat(),
    }
    if m.kind != "chat":
        out["kind"] = m.kind
    if m.importance:
        out["importance"] = m.importance
    if m.model:
        out["model"] = m.model
    if m.command:
        out["command"] = m.command
    if m.deliveries:
        out["delivery"] = [
            {"part": d.part_no, "status": d.status, "error": d.last_error} for d in m.deliveries
        ]
    return out


def _session(s: SessionRecord) -> dict[str, Any]:
    return {
        "id": s.id,
        "key": str(s.key),
        "status": s.status,
        "title": s.title,
        "topic": s.topic,
        "priority": s.priority,
        "tags": list(s.tags),
        "message_count": s.message_count,
        "last_seq_no": s.last_seq_no,
        "last_message_at": _json(s.last_message_at),
    }


def new_mcp_server() -> MCPServer:
    """An MCP server with no tools yet (``gateway.runtime.mcp.register_tools`` adds them all,
    the same list on ``/mcp`` and over stdio)."""
    # MCPServer's constructor calls logging.basicConfig(); keep whatever logging the gateway
    # (or the test run) configured instead of gaining a second root handler
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    server: MCPServer = MCPServer("chat-gateway", instructions=INSTRUCTIONS, version="0.1.0")
    root.handlers[:] = handlers
    root.setLevel(level)
    return server


def add_session_tools(server: MCPServer, service: OperatorService) -> None:
    """The session tools: read, search, post, write and record."""
    _reading_tools(server, service)
    _searching_tools(server, service)
    _posting_tools(server, service)
    _writing_tools(server, service)
    _lifecycle_tools(server, service)
    _record_tools(server, service)
    _link_tools(server, service)


def _reading_tools(server: MCPServer, service: OperatorService) -> None:
    """Tools that list sessions and read one session's messages since a point."""
    ops = service.ops

    @server.tool()
    async def list_sessions(
        platform: Annotated[str | None, Field(max_length=64)] = None,
        chat: Annotated[str | None, Field(max_length=256)] = None,
        status: SessionStatus | None = None,
        title_contains: Annotated[str | None, Field(max_length=200)] = None,
        topic_contains: Annotated[str | None, Field(max_length=200)] = None,
        min_priority: Annotated[int | None, Field(ge=-32768, le=32767)] = None,
        tags: Annotated[list[Tag] | None, Field(max_length=20)] = None,
        limit: Annotated[int, Field(ge=1, le=200)] = 20,
        cursor: Annotated[str | None, Field(max_length=500)] = None,
    ) -> dict[str, Any]:
        """Sessions, newest activity first, filtered by platform, chat, status (active,
        paused, closed, archived), title or topic text, a minimum priority, or tags (sessions
        carrying all of them). Pass next_cursor back as cursor for the next page."""
        with _as_tool_error():
            page = await service.list_sessions(
                platform=platform,
                chat_id=chat,
                status=status,
                title_contains=title_contains,
                topic_contains=topic_contains,
                min_priority=min_priority,
                tags=tags,
                cursor=cursor,
                limit=limit,
            )
        return {"sessions": [_session(s) for s in page.items], "next_cursor": page.next_cursor}

    @server.tool()
    async def get_session_delta(
        session: SessionRef,
        after_seq: Annotated[int, Field(ge=0, lt=2**63)] = 0,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
    ) -> dict[str, Any]:
        """Messages after seq after_seq, oldest first (at most limit). Call again with
        after_seq=next_after_seq to follow the session; has_more says whether to."""
        with _as_tool_error():
            found = await service.resolve(session)
            messages = await ops.store.sessions.messages(
                found.id, after_seq=after_seq, limit=limit, with_deliveries=True
            )
        next_after = messages[-1].seq_no if messages else after_seq
        return {
            "session_id": found.id,
            "key": str(found.key),
            "status": found.status,
            "last_seq_no": found.last_seq_no,
            "messages": [_message(m) for m in messages],
            "next_after_seq": next_after,
            "has_more": next_after < found.last_seq_no,
        }


def _searching_tools(server: MCPServer, service: OperatorService) -> None:
    """Tools that search sessions and read what is recorded about one."""
    ops = service.ops

    @server.tool()
    async def search_session(
        query: Annotated[str, Field(min_length=1, max_length=500, pattern=r"\w")],
        session: SessionRef | None = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Field(max_length=500)] = None,
    ) -> dict[str, Any]:
        """Full-text search (words, "a phrase", -excluded, or) inside one session, or
        across all sessions when session is omitted. Newest first; «» mark the matches."""
        with _as_tool_error():
            session_id = None if session is None else (await service.resolve(session)).id
            page = await service.search(query, session_id=session_id, cursor=cursor, limit=limit)
        return {
            "hits": [
                {
                    "session_id": h.session_id,
                    "key": str(h.session_key),
                    "title": h.session_title,
                    "seq_no": h.seq_no,
                    "role": h.role,
                    "sender": h.sender_name,
                    "snippet": h.snippet,
                }
                for h in page.items
            ],
            "next_cursor": page.next_cursor,
        }

    @server.tool()
    async def get_session_summaries(session: SessionRef) -> dict[str, Any]:
        """The session's rolling summaries (seq ranges they stand for), newest first."""
        with _as_tool_error():
            detail = await ops.session_detail((await service.resolve(session)).id)
        return {"session_id": detail.session.id, "summaries": _json(detail.summaries)}

    @server.tool()
    async def get_session_decisions(
        session: SessionRef, limit: Annotated[int, Field(ge=1, le=500)] = 200
    ) -> dict[str, Any]:
        """The session's decisions (messages of kind decision: /decision TEXT typed in the
        thread, or appended with kind=decision), oldest first, and its unresolved checkpoints
        (not done or cancelled). Both are read from indexes, cheap to call every turn."""
        with _as_tool_error():
            found, decisions, checkpoints = await service.decisions(session, limit=limit)
        return {
            "session_id": found.id,
            "decisions": [
                {**_message(m), "text": decision_text(m.content) if m.command else m.content}
                for m in decisions
            ],
            "open_checkpoints": _json(checkpoints),
        }

    @server.tool()
    async def get_session_checkpoints(session: SessionRef) -> dict[str, Any]:
        """The session's tracked steps and their status."""
        with _as_tool_error():
            detail = await ops.session_detail((await service.resolve(session)).id)
        return {"session_id": detail.session.id, "checkpoints": _json(detail.checkpoints)}

    @server.tool()
    async def get_session_artifacts(session: SessionRef) -> dict[str, Any]:
        """The outputs linked to the session (uri or inline content)."""
        with _as_tool_error():
            detail = await ops.session_detail((await service.resolve(session)).id)
        return {"session_id": detail.session.id, "artifacts": _json(detail.artifacts)}

    @server.tool()
    async def get_session_participants(session: SessionRef) -> dict[str, Any]:
        """Who takes part (platform users with role user, the assistant, MCP agents) and how
        far each has read."""
        with _as_tool_error():
            detail = await ops.session_detail((await service.resolve(session)).id)
        return {"session_id": detail.session.id, "participants": _json(detail.participants)}


def _posting_tools(server: MCPServer, service: OperatorService) -> None:
    """Tools that post into sessions: one message or a batch."""
    ops = service.ops

    @server.tool()
    async def append_session_message(
        session: SessionRef,
        participant: ParticipantName,
        content: Annotated[str, Field(min_length=1, max_length=20_000)],
        deliver: bool = False,
        model: Annotated[str | None, Field(max_length=128)] = None,
        kind: MessageKind = "chat",
        importance: Annotated[int, Field(ge=0, le=100)] = 0,
    ) -> dict[str, Any]:
        """Append a message to an open (active or paused) session as participant. With
        deliver=true it is also sent to the session's own platform thread (the place its last
        user message came from) through the gateway's outbox, with retries; otherwise it is
        only stored. kind says what it is (chat, proposal, review, decision, summary,
        question, answer, warning, tool_result): decisions are read back with
        get_session_decisions."""
        with _as_tool_error():
            message = await service.append(
                session,
                participant=participant,
                content=content,
                deliver=deliver,
                model=model,
                kind=kind,
                importance=importance,
            )
        await audit.record(
            ops.store,
            "session.message.append",
            ("session", message.session_id),
            details={
                "participant": participant,
                "seq_no": message.seq_no,
                "deliver": deliver,
                "kind": kind,
            },
        )
        log.info(
            "mcp_message_appended",
            session_id=message.session_id,
            seq_no=message.seq_no,
            participant=participant,
            delivered=bool(message.deliveries),
        )
        return {"session_id": message.session_id, **_message(message)}

    @server.tool()
    async def append_session_messages(
        session: SessionRef,
        participant: ParticipantName,
        messages: Annotated[list[BatchItem], Field(min_length=1, max_length=100)],
    ) -> dict[str, Any]:
        """Append up to 100 messages as participant in one transaction (all or none,
        consecutive seq numbers). Stored only: use append_session_message with deliver=true
        to post to the thread."""
        with _as_tool_error():
            found = await service.resolve(session)
            stored = await ops.append_messages(
                found.id,
                participant=participant,
                items=[(m.content, m.role, m.model) for m in messages],
            )
        await audit.record(
            ops.store,
            "session.messages.append",
            ("session", found.id),
            details={"participant": participant, "seq_nos": [m.seq_no for m in stored]},
        )
        return {"session_id": found.id, "seq_nos": [m.seq_no for m in stored]}


def _writing_tools(server: MCPServer, service: OperatorService) -> None:
    """Tools that open and close sessions and move a participant's read cursor."""
    ops = service.ops

    @server.tool()
    async def create_session(
        platform: Annotated[str, Field(min_length=1, max_length=64)],
        scope: Annotated[str, Field(min_length=1, max_length=256)],
        chat: Annotated[str, Field(min_length=1, max_length=256)],
        participant: ParticipantName,
        thread: Annotated[str | None, Field(max_length=256)] = None,
        title: Annotated[str | None, Field(max_length=200)] = None,
        kind: Annotated[str, Field(min_length=1, max_length=64)] = "chat",
    ) -> dict[str, Any]:
        """Open a session for a place (platform, scope, chat, thread), or return the active
        one if it exists already (created=false). The creator becomes a participant. The
        place's reply target is stored with it (a Telegram chat or topic, a Slack channel root
        or thread, a Mattermost channel or root post, a web chat thread), so
        append_session_message with deliver=true posts there even if nobody wrote there yet."""
        key = SessionKey(platform=platform, scope=scope, chat_id=chat, thread_id=thread)
        with _as_tool_error():
            session, created = await ops.create_session(
                key,
                participant=participant,
                title=title,
                kind=kind,
                reply_target=target_of_place(key),
            )
        await audit.record(
            ops.store,
            "session.create",
            ("session", session.id),
            details={"participant": participant, "key": str(session.key), "created": created},
        )
        log.info("mcp_session_created", session_id=session.id, created=created)
        return {
            "session_id": session.id,
            "key": str(session.key),
            "created": created,
            "status": session.status,
            "last_seq_no": session.last_seq_no,
        }

    @server.tool()
    async def close_session(session: SessionRef) -> dict[str, Any]:
        """Close the session. The next message in its thread opens a fresh session."""
        with _as_tool_error():
            found = await service.resolve(session)
            closed = await ops.close_session(found.id)
        await audit.record(
            ops.store, "session.close", ("session", found.id), details={"closed": closed}
        )
        return {"session_id": found.id, "closed": closed, "status": "closed"}

    @server.tool()
    async def mark_read(
        session: SessionRef,
        participant: ParticipantName,
        seq_no: Seq | None = None,
    ) -> dict[str, Any]:
        """Move participant's read cursor to seq_no (default: the newest message). It never
        moves backwards; unread counts the messages after it."""
        with _as_tool_error():
            found = await service.resolve(session)
            cursor = await ops.mark_read(found.id, participant, seq_no=seq_no)
            latest = await ops.store.sessions.get_session(found.id)
        return {
            "session_id": found.id,
            "participant": cursor.participant,
            "last_read_seq": cursor.last_read_seq,
            "unread": max(latest.last_seq_no - cursor.last_read_seq, 0),
        }


def _lifecycle_tools(server: MCPServer, service: OperatorService) -> None:
    """A session's lifecycle (pause, resume, archive) and its topic, priority and tags."""
    ops = service.ops

    async def _move(session: SessionRef, step: str, action: str) -> dict[str, Any]:
        with _as_tool_error():
            moved = await service.move(session, step)
        await audit.record(ops.store, action, ("session", moved.id), details={"to": moved.status})
        log.info("mcp_session_moved", session_id=moved.id, status=moved.status)
        return {"session_id": moved.id, "status": moved.status}

    @server.tool()
    async def pause_session(session: SessionRef) -> dict[str, Any]:
        """Pause an active session: what arrives in its thread is stored, nothing is answered
        until it is resumed."""
        return await _move(session, "pause", "session.pause")

    @server.tool()
    async def resume_session(session: SessionRef) -> dict[str, Any]:
        """Resume a paused session: what arrived while it was paused is answered (one turn)."""
        return await _move(session, "resume", "session.resume")

    @server.tool()
    async def archive_session(session: SessionRef) -> dict[str, Any]:
        """Archive a closed session: read-only from then on (a message in its thread opens a
        new session)."""
        return await _move(session, "archive", "session.archive")

    @server.tool()
    async def update_session(
        session: SessionRef,
        topic: Annotated[str | None, Field(max_length=200)] = None,
        priority: Annotated[int | None, Field(ge=-32768, le=32767)] = None,
        tags: Annotated[list[Tag] | None, Field(max_length=20)] = None,
    ) -> dict[str, Any]:
        """Set the session's topic, priority or tags (tags replace the set; what is not given
        is kept). Archived sessions are read-only."""
        with _as_tool_error():
            updated = await service.set_attributes(
                session, topic=topic, priority=priority, tags=tags
            )
        await audit.record(
            ops.store,
            "session.update",
            ("session", updated.id),
            details={"topic": topic, "priority": priority, "tags": tags},
        )
        return _session(updated)


def _record_tools(server: MCPServer, service: OperatorService) -> None:
    """Tools that record about a session: checkpoints, summaries, artifacts. Every write
    of this module is also recorded in the audit log (mark_read, a reader's bookmark, is
    not)."""
    ops = service.ops

    @server.tool()
    async def update_checkpoint(
        session: SessionRef,
        name: Annotated[str, Field(min_length=1, max_length=200)],
        status: CheckpointStatus,
        detail: Annotated[str | None, Field(max_length=4000)] = None,
        seq_no: Seq | None = None,
    ) -> dict[str, Any]:
        """Create or update one of the session's tracked steps (by name)."""
        with _as_tool_error():
            found = await service.resolve(session)
            checkpoint = await ops.update_checkpoint(
                found.id, name=name, status=status, seq_no=seq_no, detail=detail
            )
        await audit.record(
            ops.store,
            "session.checkpoint.update",
            ("session", found.id),
            details={"name": name, "status": status},
        )
        return {"checkpoint": _json(checkpoint)}

    @server.tool()
    async def create_session_summary(
        session: SessionRef,
        from_seq: Seq,
        to_seq: Seq,
        content: Annotated[str, Field(min_length=1, max_length=50_000)],
        model: Annotated[str | None, Field(max_length=128)] = None,
    ) -> dict[str, Any]:
        """Store a summary of messages from_seq..to_seq (inclusive). The newest summary
        plus the messages after it is what a context is built from."""
        with _as_tool_error():
            found = await service.resolve(session)
            summary = await ops.create_summary(
                found.id, from_seq=from_seq, to_seq=to_seq, content=content, model=model
            )
        await audit.record(
            ops.store,
            "session.summary.create",
            ("session", found.id),
            details={"from_seq": from_seq, "to_seq": to_seq},
        )
        return {"summary": _json(summary)}

    @server.tool()
    async def link_session_artifact(
        session: SessionRef,
        kind: Annotated[str, Field(min_length=1, max_length=64)],
        name: Annotated[str, Field(min_length=1, max_length=200)],
        uri: Annotated[str | None, Field(max_length=2000)] = None,
        content: Annotated[str | None, Field(max_length=100_000)] = None,
        seq_no: Seq | None = None,
    ) -> dict[str, Any]:
        """Attach an output to the session (a file, a PR, a document: by uri or inline
        content), optionally pinned to the message (seq_no) it came from."""
        if uri is None and content is None:
            raise ToolError("give the artifact a uri or content")
        with _as_tool_error():
            found = await service.resolve(session)
            artifact = await ops.add_artifact(
                found.id, kind=kind, name=name, uri=uri, content=content, seq_no=seq_no
            )
        await audit.record(
            ops.store,
            "session.artifact.link",
            ("session", found.id),
            details={"kind": kind, "name": name, "uri": uri},
        )
        return {"artifact": _json(artifact)}


def _link_tools(server: MCPServer, service: OperatorService) -> None:
    """A session's links, each write recorded in the audit log."""
    ops = service.ops

    @server.tool()
    async def link_session(
        session: SessionRef,
        link_type: LinkType,
        target_ref: Annotated[str, Field(min_length=1, max_length=2000)],
        relation: LinkRelation,
    ) -> dict[str, Any]:
        """Link the session to a law, document, task, collection, issue, report or artifact
        (target_ref: its id, path or URL), as the session's input, evidence or output, as
        related, or as what the session supersedes. Listed with the session by the admin
        API and by gateway sessions show."""
        with _as_tool_error():
            found = await service.resolve(session)
            link = await ops.add_link(
                found.id, link_type=link_type, target_ref=target_ref, relation=relation
            )
        await audit.record(
            ops.store,
            "session.link.add",
            ("session", found.id),
            details={"link_type": link_type, "target_ref": target_ref, "relation": relation},
        )
        return {"link": _json(link)}
