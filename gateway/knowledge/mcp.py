"""The knowledge base as MCP tools (on ``/mcp``): list, search, upload, reindex, delete
documents, and read an answer's frozen citations. The same retriever as the turns."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from gateway import audit
from gateway.knowledge.citations import source_label
from gateway.knowledge.files import FileStorageError
from gateway.knowledge.places import DEFAULT_KB, Chat, check_name
from gateway.knowledge.service import FileRejected, Knowledge

KB_TOOLS = (
    "kb_list",
    "kb_search",
    "kb_upload",
    "kb_reindex",
    "kb_delete",
    "kb_citations",
    "kb_assign",
    "kb_unassign",
    "kb_assignments",
)
KbName = Annotated[str, Field(min_length=1, max_length=200)]
DocId = Annotated[int, Field(ge=1, lt=2**63)]
ChatName = Annotated[
    str,
    Field(min_length=5, max_length=600, description="platform:scope:chat, e.g. web:local:general"),
]


def _chat(text: str) -> Chat:
    try:
        return Chat.parse(text)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc


def add_knowledge_tools(server: MCPServer, knowledge: Knowledge) -> None:

    _document_tools(server, knowledge)
    _document_change_tools(server, knowledge)
    _assignment_tools(server, knowledge)


def _document_tools(server: MCPServer, knowledge: Knowledge) -> None:
    """Tools that list and search the documents of the knowledge bases."""
    store = knowledge.store

    @server.tool()
    async def kb_list(kb: KbName | None = None) -> dict[str, Any]:
        """Documents (of one knowledge base, or all) with their ingest state."""
        docs = await store.list_documents(kb_name=kb)
        return {
            "documents": [
                {
                    "id": d.id,
                    "kb": d.kb_name,
                    "name": d.name,
                    "state": d.state_text,
                    "pages": d.pages,
                    "passages": d.chunk_count,
                    "accessed": d.access_count,
                }
                for d in docs
            ]
        }

    @server.tool()
    async def kb_search(
        query: Annotated[str, Field(min_length=1, max_length=1000)],
        kb: KbName = DEFAULT_KB,
        limit: Annotated[int, Field(ge=1, le=50)] = 5,
    ) -> dict[str, Any]:
        """The passages retrieval would give the model for ``query``, best first, with
        their document and page or section."""
        result = await knowledge.retrieval.search(query, kbs=[kb], limit=limit)
        return {
            "mode": result.mode,
            "passages": [
                {
                    "source": source_label(
                        {"document_name": h.document_name, "page": h.page, "section": h.section}
                    ),
                    "document_id": h.document_id,
                    "page": h.page,
                    "section": h.section,
                    "score": h.score,
                    "text": h.content,
                }
                for h in result.hits
            ],
        }


def _document_change_tools(server: MCPServer, knowledge: Knowledge) -> None:
    """Tools that add, re-read and remove documents, and show an answer's citations."""
    store = knowledge.store

    @server.tool()
    async def kb_upload(
        name: Annotated[str, Field(min_length=1, max_length=255)],
        text: str | None = None,
        content_base64: str | None = None,
        kb: KbName = DEFAULT_KB,
    ) -> dict[str, Any]:
        """Add a document: ``text`` for text formats (Markdown, HTML, CSV, plain text), or
        ``content_base64`` for any file (PDF, DOCX...). The same content is one document."""
        if (text is None) == (content_base64 is None):
            raise ToolError("give exactly one of text or content_base64")
        try:
            data = (
                text.encode("utf-8")
                if text is not None
                else base64.b64decode(content_base64 or "", validate=True)
            )
        except (binascii.Error, ValueError) as exc:
            raise ToolError(f"content_base64 is not base64: {exc}") from exc
        try:
            added = await knowledge.add(name, data, kb=kb)
        except (FileRejected, FileStorageError) as exc:
            raise ToolError(str(exc)) from exc
        await audit.record(
            store,
            "kb.document.add",
            ("kb", kb),
            details={"name": name, "bytes": len(data), "document_id": added.document.id},
        )
        return {
            "id": added.document.id,
            "state": added.document.state_text,
            "created": added.created,
        }

    @server.tool()
    async def kb_reindex(document_id: DocId) -> dict[str, Any]:
        """Read and embed a document again."""
        if not await store.reindex_document(document_id):
            raise ToolError(f"no document {document_id}")
        await audit.record(store, "kb.document.reindex", ("kb.document", document_id))
        knowledge.wake.set()
        return {"id": document_id, "state": "queued"}

    @server.tool()
    async def kb_delete(document_id: DocId) -> dict[str, Any]:
        """Delete a document and its passages; answers that cited it keep their citations."""
        if not await knowledge.intake.remove(document_id):
            raise ToolError(f"no document {document_id}")
        await audit.record(store, "kb.document.delete", ("kb.document", document_id))
        return {"id": document_id, "deleted": True}

    @server.tool()
    async def kb_citations(message_id: DocId) -> dict[str, Any]:
        """What an answer (an assistant message id) cites, frozen when it was written; a cited
        session's minutes name that session (``minutes_of``)."""
        return {
            "citations": [
                {
                    "n": c.ordinal,
                    "document": c.document_name,
                    "page": c.page,
                    "section": c.section,
                    "passage": c.passage,
                    "score": c.score,
                    "minutes_of": c.minutes_of,
                }
                for c in await store.citations(message_id)
            ]
        }


def _assignment_tools(server: MCPServer, knowledge: Knowledge) -> None:
    store = knowledge.store

    @server.tool()
    async def kb_assign(kb: KbName, chat: ChatName) -> dict[str, Any]:
        """Search the knowledge base ``kb`` (created if new) in every thread of ``chat``."""
        where = _chat(chat)
        try:
            check_name(kb)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        created = await knowledge.catalog.assign(kb, where)
        await audit.record(
            store, "kb.assign", ("kb", kb), details={"chat": str(where), "new": created}
        )
        return {"kb": kb, "chat": str(where), "assigned": True, "new": created}

    @server.tool()
    async def kb_unassign(kb: KbName, chat: ChatName) -> dict[str, Any]:
        """Stop searching the knowledge base ``kb`` in ``chat``."""
        where = _chat(chat)
        if not await knowledge.catalog.unassign(kb, where):
            raise ToolError(f"{kb} is not assigned to {where}")
        await audit.record(store, "kb.unassign", ("kb", kb), details={"chat": str(where)})
        return {"kb": kb, "chat": str(where), "assigned": False}

    @server.tool()
    async def kb_assignments(kb: KbName | None = None) -> dict[str, Any]:
        """Knowledge bases assigned to chats (of one base, or all)."""
        return {
            "assignments": [
                {"kb": a.kb_name, "chat": a.chat} for a in await store.assignments(kb_name=kb)
            ]
        }
